"""The workflow executor against a scripted host, on CPython: the order
commands are scheduled in, the order completions are delivered in, and
what gather, select, shield and a cancel do."""

import unittest
from dataclasses import dataclass

from keel import _executor
from keel.errors import Cancelled


@dataclass
class Completion:
    id: int
    outcome: object


@dataclass
class Wake_Completed:
    value: Completion


@dataclass
class Request:
    reason: str
    by: str


@dataclass
class Wake_Cancelled:
    value: Request


class Host:
    """Schedules commands in order and completes them as `script` says:
    a list of command IDs (or "cancel"), delivered in that order when
    awaited."""

    def __init__(self, script):
        self.script = list(script)
        self.scheduled = []
        self.awaited = []
        self.cancelled_calls = 0

    def schedule(self, what):
        self.scheduled.append(what)
        return len(self.scheduled)

    def await_any(self, ids):
        self.awaited.append(list(ids))
        nxt = self.script.pop(0)
        if nxt == "cancel":
            return Wake_Cancelled(Request("stop", "api"))
        assert nxt in ids, f"{nxt} completed but only {ids} are awaited"
        return Wake_Completed(Completion(nxt, f"out {nxt}"))

    def cancelled_call(self):
        self.cancelled_calls += 1


def run(host, coro_fn):
    ex = _executor.Executor(host, host.await_any)
    _executor.install(ex)
    try:
        return ex.run(coro_fn())
    finally:
        _executor.install(None)


def command(host, what):
    return _executor.Command(lambda: host.schedule(what), lambda outcome, _id: outcome)


class ExecutorTest(unittest.TestCase):
    def test_sequential_awaits_schedule_one_at_a_time(self):
        host = Host([1, 2])

        async def wf():
            a = await command(host, "a")
            b = await command(host, "b")
            return [a, b]

        self.assertEqual(run(host, wf), ["out 1", "out 2"])
        self.assertEqual(host.scheduled, ["a", "b"])
        self.assertEqual(host.awaited, [[1], [2]])

    def test_gather_schedules_in_argument_order_and_returns_in_it(self):
        host = Host([3, 1, 2])

        async def wf():
            return await _executor.gather(command(host, "x"), command(host, "y"), command(host, "z"))

        self.assertEqual(run(host, wf), ["out 1", "out 2", "out 3"])
        self.assertEqual(host.scheduled, ["x", "y", "z"])
        self.assertEqual(host.awaited, [[1, 2, 3], [1, 2], [2]])

    def test_select_returns_the_first_completion_and_stops_the_rest(self):
        host = Host([2, 3])

        async def wf():
            index, value = await _executor.select(command(host, "hook"), command(host, "timer"))
            after = await command(host, "next")
            return index, value, after

        self.assertEqual(run(host, wf), (1, "out 2", "out 3"))
        self.assertEqual(host.awaited, [[1, 2], [3]], "the loser is no longer awaited")

    def test_a_failing_child_of_gather_raises_its_error(self):
        host = Host([1])

        async def boom():
            await command(host, "a")
            raise ValueError("no")

        async def wf():
            return await _executor.gather(boom(), command(host, "b"))

        with self.assertRaisesRegex(ValueError, "no"):
            run(host, wf)

    def test_a_cancel_fails_awaits_except_inside_shield(self):
        host = Host(["cancel", 2])

        async def wf():
            try:
                await command(host, "work")
            except Cancelled as e:
                self.assertEqual((e.reason, e.by), ("stop", "api"))
                cleaned = await _executor.shield(command(host, "cleanup"))
                try:
                    await command(host, "more")
                except Cancelled:
                    return cleaned
            raise AssertionError("not cancelled")

        self.assertEqual(run(host, wf), "out 2")
        self.assertEqual(host.scheduled, ["work", "cleanup"])
        self.assertEqual(host.cancelled_calls, 1, "the refused call is reported once")

    def test_awaiting_something_else_fails_with_a_clear_error(self):
        host = Host([])

        class Foreign:
            def __await__(self):
                yield "an asyncio future"

        async def wf():
            await Foreign()

        with self.assertRaisesRegex(RuntimeError, "not a keel awaitable"):
            run(host, wf)


if __name__ == "__main__":
    unittest.main()


class CommandTest(unittest.TestCase):
    def test_a_completed_command_awaited_again_gives_the_same_result_without_the_host(self):
        host = Host([1])

        def failing(outcome, _id):
            raise ValueError(outcome)

        async def wf():
            ok = command(host, "a")
            first = await ok
            again = await ok
            bad = _executor.Command(lambda: host.schedule("b"), failing)
            host.script.append(2)
            errors = []
            for _ in range(2):
                try:
                    await bad
                except ValueError as e:
                    errors.append(str(e))
            return first, again, errors, ok.scheduled

        self.assertEqual(run(host, wf), ("out 1", "out 1", ["out 2", "out 2"], True))
        self.assertEqual(host.awaited, [[1], [2]], "each command is awaited from the host once")

    def test_a_step_in_flight_at_the_cancel_is_awaited_to_its_end_inside_shield(self):
        host = Host(["cancel", 1, 2])

        async def wf():
            charge = command(host, "charge")
            try:
                await charge
            except Cancelled:
                async def undo():
                    taken = await charge
                    return taken, await command(host, "refund")

                return await _executor.shield(undo())

        self.assertEqual(run(host, wf), ("out 1", "out 2"))
        self.assertEqual(host.scheduled, ["charge", "refund"])
