"""The codec and the registry's parsing, on CPython."""

import unittest
from dataclasses import dataclass, field
from typing import Literal, Optional, TypedDict

from keel import _codec, _registry


@dataclass
class Line:
    sku: str
    qty: int = 1


@dataclass
class Order:
    order_id: str
    lines: list[Line]
    note: Optional[str] = None
    tags: dict[str, str] = field(default_factory=dict)


class Update(TypedDict):
    note: str
    done: bool


class CodecTest(unittest.TestCase):
    def test_dataclasses_round_trip_through_json_data(self):
        order = Order("o-1", [Line("a", 2), Line("b")], tags={"k": "v"})
        data = _codec.encode(order)
        self.assertEqual(
            data,
            {"order_id": "o-1", "lines": [{"sku": "a", "qty": 2}, {"sku": "b", "qty": 1}],
             "note": None, "tags": {"k": "v"}},
        )
        self.assertEqual(_codec.decode(Order, data), order)

    def test_a_mismatch_names_its_path(self):
        with self.assertRaises(_codec.DecodeError) as e:
            _codec.decode(Order, {"order_id": "o", "lines": [{"sku": "a", "qty": "two"}]})
        self.assertEqual(e.exception.path, "/lines/0/qty")
        with self.assertRaises(_codec.DecodeError) as e:
            _codec.decode(Order, {"lines": []})
        self.assertIn("order_id", str(e.exception))
        with self.assertRaises(_codec.DecodeError):
            _codec.decode(int, True)
        with self.assertRaises(_codec.DecodeError):
            _codec.decode(Literal["a", "b"], "c")

    def test_typeddicts_and_unions(self):
        self.assertEqual(_codec.decode(Update, {"note": "n", "done": False}), {"note": "n", "done": False})
        with self.assertRaises(_codec.DecodeError):
            _codec.decode(Update, {"note": "n"})
        self.assertIsNone(_codec.decode(Optional[int], None))
        self.assertEqual(_codec.decode(int | str, "x"), "x")

    def test_schemas_say_what_decode_accepts(self):
        s = _codec.schema(Order)
        self.assertEqual(s["type"], "object")
        self.assertEqual(s["required"], ["order_id", "lines"])
        self.assertEqual(s["properties"]["lines"]["items"]["properties"]["qty"], {"type": "integer"})
        self.assertEqual(s["properties"]["note"], {"anyOf": [{"type": "string"}, {"type": "null"}]})
        self.assertEqual(_codec.schema(Update)["required"], ["done", "note"])
        self.assertEqual(_codec.schema(Literal["a", "b"]), {"enum": ["a", "b"]})


class DurationTest(unittest.TestCase):
    def test_durations_are_seconds_or_strings(self):
        self.assertEqual(_registry.duration_ms(1.5), 1500)
        self.assertEqual(_registry.duration_ms("100ms"), 100)
        self.assertEqual(_registry.duration_ms("1m30s"), 90_000)
        self.assertEqual(_registry.duration_ms("2h"), 7_200_000)
        for bad in ("soon", "1 fortnight", -1, True, "5"):
            with self.assertRaises(ValueError):
                _registry.duration_ms(bad)


if __name__ == "__main__":
    unittest.main()
