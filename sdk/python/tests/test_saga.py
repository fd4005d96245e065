"""keel.Saga against a scripted host, on CPython: compensations run once,
in reverse order, each to its end through a cancel, and the body's own
error is the one raised."""

import unittest

from keel import _executor
from keel._saga import Saga
from keel.errors import Cancelled

from .test_executor import Host, command, run


def failing(host, what):
    """A command that fails with ``RuntimeError(what)`` once completed."""

    def convert(_outcome, _id):
        raise RuntimeError(what)

    return _executor.Command(lambda: host.schedule(what), convert)


class SagaTest(unittest.TestCase):
    def test_a_failure_undoes_what_took_effect_in_reverse_and_keeps_its_error(self):
        host = Host([1, 2, 3, 4, 5])
        saga = Saga()

        async def wf():
            async with saga:
                await saga.step(command(host, "reserve"), lambda r: command(host, f"release {r}"))
                await saga.step(command(host, "charge"), lambda c: command(host, f"refund {c}"))
                await failing(host, "ship")

        with self.assertRaisesRegex(RuntimeError, "^ship$"):
            run(host, wf)
        self.assertEqual(host.scheduled, ["reserve", "charge", "ship", "refund out 2", "release out 1"])

    def test_a_cancel_mid_step_lets_it_finish_then_undoes_it_too(self):
        host = Host([1, "cancel", 2, 3, 4])
        saga = Saga()

        async def wf():
            async def body():
                await saga.step(command(host, "reserve"), lambda r: command(host, f"release {r}"))
                await saga.step(command(host, "charge"), lambda c: command(host, f"refund {c}"))
                await command(host, "never")

            return await saga.run(body())

        with self.assertRaises(Cancelled):
            run(host, wf)
        self.assertEqual(host.scheduled, ["reserve", "charge", "refund out 2", "release out 1"])

    def test_a_failing_compensation_does_not_stop_the_others_and_is_noted(self):
        host = Host([1, 2, 3, 4, 5])
        saga = Saga()

        async def wf():
            async with saga:
                await saga.step(command(host, "a"), lambda _: command(host, "undo a"))
                await saga.step(command(host, "b"), lambda _: failing(host, "undo b"))
                await failing(host, "c")

        with self.assertRaisesRegex(RuntimeError, "^c$") as raised:
            run(host, wf)
        self.assertEqual(host.scheduled, ["a", "b", "c", "undo b", "undo a"])
        self.assertEqual(raised.exception.__notes__, ["then a compensation failed: undo b"])

    def test_a_completed_body_compensates_nothing(self):
        host = Host([1])
        saga = Saga()

        async def wf():
            async with saga:
                return await saga.step(command(host, "a"), lambda _: command(host, "undo a"))

        self.assertEqual(run(host, wf), "out 1")
        self.assertEqual(host.scheduled, ["a"])


if __name__ == "__main__":
    unittest.main()
