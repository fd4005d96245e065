"""When ``python -m keel build`` builds again: the digest of a build's
inputs, and the stamp that lets an unchanged project skip componentize-py."""

import tempfile
import unittest
from pathlib import Path

from keel import __main__ as build


class InputsDigestTest(unittest.TestCase):
    def setUp(self):
        self.dir = Path(tempfile.mkdtemp(prefix="keel-build-test-"))
        (self.dir / "app.py").write_text("import helpers\n")
        (self.dir / "helpers.py").write_text("X = 1\n")

    def digest(self, module="app"):
        return build.inputs_digest(module, [str(self.dir)])

    def test_a_source_change_changes_the_digest(self):
        before = self.digest()
        self.assertEqual(before, self.digest(), "the same inputs, the same digest")
        (self.dir / "helpers.py").write_text("X = 2\n")
        self.assertNotEqual(before, self.digest())

    def test_a_new_or_renamed_source_changes_the_digest(self):
        before = self.digest()
        (self.dir / "more.py").write_text("")
        added = self.digest()
        self.assertNotEqual(before, added)
        (self.dir / "more.py").rename(self.dir / "other.py")
        self.assertNotEqual(added, self.digest())

    def test_the_module_is_part_of_the_inputs(self):
        self.assertNotEqual(self.digest("app"), self.digest("helpers"))

    def test_what_staging_leaves_out_does_not_count(self):
        before = self.digest()
        for ignored in [".venv/lib/x.py", "build/app.wasm", "__pycache__/app.pyc", "app.wasm", "app.wasm.inputs",
                        "journals/greet.journal"]:
            path = self.dir / ignored
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("anything")
        self.assertEqual(before, self.digest())

    def test_a_component_is_up_to_date_only_with_its_stamp_of_the_same_inputs(self):
        out = self.dir / "build" / "app.wasm"
        out.parent.mkdir()
        digest = self.digest()
        self.assertFalse(build.up_to_date(out, digest), "no component yet")
        out.write_bytes(b"\0asm")
        self.assertFalse(build.up_to_date(out, digest), "a component with no stamp is built again")
        (out.parent / "app.wasm.inputs").write_text(digest + "\n")
        self.assertTrue(build.up_to_date(out, digest))
        (self.dir / "app.py").write_text("import helpers  # changed\n")
        self.assertFalse(build.up_to_date(out, self.digest()))


if __name__ == "__main__":
    unittest.main()
