"""The workflow's executor: runs the workflow's coroutine and the tasks it
starts with :func:`gather` and :func:`select` on one thread, and, whenever
every task waits, asks the host for the next completion of the commands
they await.

A command is scheduled when its awaitable is first awaited, so the order
of commands is the order in which the workflow's code awaits them, which
is deterministic: ready tasks run first-in first-out. The host delivers
completions in journal order, so a replay wakes the same tasks in the same
order.

The run's cancel is delivered the same way, once. From then on every keel
awaitable fails with :class:`Cancelled` without reaching the host, unless
it is awaited inside :func:`shield`: the workflow's cleanup.
"""

from __future__ import annotations

import collections
from typing import Any, Awaitable, Callable, Coroutine, Optional

from .errors import Cancelled, KeelError

__all__ = ["Command", "Executor", "current", "gather", "select", "shield"]


class _WaitCommand:
    """What a task yields to wait for command ``id``."""

    __slots__ = ("id",)

    def __init__(self, id: int):
        self.id = id


class _WaitTasks:
    """What a task yields to wait for its children: all, or the first."""

    __slots__ = ("tasks", "first")

    def __init__(self, tasks: list, first: bool):
        self.tasks = tasks
        self.first = first


class Task:
    """A coroutine the executor drives."""

    def __init__(self, coro: Coroutine, shielded: bool, parent: Optional["Task"]):
        self.coro = coro
        self.shielded = shielded
        self.parent = parent
        self.done = False
        self.result: Any = None
        self.error: Optional[BaseException] = None
        self.waiting: Any = None  # a _WaitCommand or _WaitTasks

    def finished(self) -> bool:
        return self.done


class Executor:
    """The state of one workflow activation."""

    def __init__(self, host: Any, await_any: Callable[[list], Any]):
        self.host = host
        self.await_any = await_any
        self.ready: collections.deque = collections.deque()
        self.by_command: dict = {}
        self.delivered: dict = {}
        self.cancel: Optional[Cancelled] = None
        self.running: Optional[Task] = None

    def spawn(self, coro: Coroutine, shielded: bool = False) -> Task:
        parent = self.running
        task = Task(coro, shielded or (parent is not None and parent.shielded), parent)
        self.ready.append(task)
        return task

    def refusing(self) -> Optional[Cancelled]:
        """The run's cancel, if awaitables awaited now must fail with it."""
        task = self.running
        if self.cancel is not None and not (task is not None and task.shielded):
            return self.cancel
        return None

    def run(self, coro: Coroutine) -> Any:
        root = self.spawn(coro)
        while True:
            while self.ready:
                self._step(self.ready.popleft())
            if root.done:
                if root.error is not None:
                    raise root.error
                return root.result
            ids = sorted(self.by_command)
            if not ids:
                raise RuntimeError(
                    "the workflow waits on something that is not a keel step, sleep, hook or "
                    "run (asyncio is not available to workflows); await only keel awaitables"
                )
            self._wake(self.await_any(ids))

    def _wake(self, wake: Any) -> None:
        completion = getattr(wake, "value", None)
        if hasattr(completion, "outcome"):
            self.delivered[completion.id] = completion.outcome
            task = self.by_command.pop(completion.id, None)
            if task is not None:
                self.ready.append(task)
            return
        request = wake.value
        self.cancel = Cancelled(request.reason, request.by)
        for id, task in sorted(self.by_command.items()):
            if not task.shielded:
                del self.by_command[id]
                self.ready.append(task)

    def _step(self, task: Task) -> None:
        if task.done:
            return
        task.waiting = None
        self.running = task
        try:
            waiting = task.coro.send(None)
        except StopIteration as stop:
            self._finish(task, stop.value, None)
            return
        except BaseException as e:  # noqa: BLE001 - a task's error is its result
            self._finish(task, None, e)
            return
        finally:
            self.running = None
        task.waiting = waiting
        if isinstance(waiting, _WaitCommand):
            self.by_command[waiting.id] = task
        elif isinstance(waiting, _WaitTasks):
            self._check_join(task)
        else:
            task.coro.close()
            self._finish(
                task,
                None,
                RuntimeError(
                    f"a workflow awaited {waiting!r}, which is not a keel awaitable; workflows "
                    "may await only keel steps, sleeps, hooks, runs, gather and select"
                ),
            )

    def _finish(self, task: Task, result: Any, error: Optional[BaseException]) -> None:
        task.done, task.result, task.error = True, result, error
        parent = task.parent
        if parent is not None and isinstance(parent.waiting, _WaitTasks) and task in parent.waiting.tasks:
            self._check_join(parent)

    def _check_join(self, task: Task) -> None:
        join = task.waiting
        done = [t for t in join.tasks if t.done]
        failed = any(t.error is not None for t in done)
        if (join.first and done) or failed or len(done) == len(join.tasks):
            task.waiting = None
            self.ready.append(task)

    def close(self, task: Task) -> None:
        """Stops ``task`` (a child that lost a select or whose sibling failed)."""
        if task.done:
            return
        for id, t in list(self.by_command.items()):
            if t is task:
                del self.by_command[id]
        if task in self.ready:
            self.ready.remove(task)
        task.coro.close()
        task.done = True
        task.error = Cancelled("the task lost a select or a sibling failed", "workflow")


_CURRENT: Optional[Executor] = None


def current() -> Executor:
    """The running workflow's executor; fails outside a workflow."""
    if _CURRENT is None:
        raise KeelError(
            "this keel call belongs in a workflow (a function decorated with @keel.workflow); "
            "steps cannot schedule steps, sleep durably or wait on hooks"
        )
    return _CURRENT


def install(executor: Optional[Executor]) -> None:
    global _CURRENT
    _CURRENT = executor


class Command:
    """An awaitable command: scheduled by ``schedule()`` when first
    awaited, completed by the host; ``convert`` turns the outcome into the
    awaitable's result (or raises). Like a task, it may be awaited again
    once complete: it gives the same result (or raises the same error)."""

    def __init__(self, schedule: Callable[[], int], convert: Callable[[Any, int], Any]):
        self._schedule = schedule
        self._convert = convert
        self.id: Optional[int] = None
        self._result: Optional[tuple] = None

    @property
    def scheduled(self) -> bool:
        """Whether the command was scheduled (it was awaited at least once)."""
        return self.id is not None

    def _complete(self, outcome: Any) -> Any:
        try:
            value = self._convert(outcome, self.id)
        except BaseException as e:
            self._result = (False, e)
            raise
        self._result = (True, value)
        return value

    def __await__(self):
        if self._result is not None:
            ok, value = self._result
            if ok:
                return value
            raise value
        ex = current()
        if self.id is None:
            cancel = ex.refusing()
            if cancel is not None:
                ex.host.cancelled_call()
                raise cancel
            self.id = self._schedule()
        while True:
            if self.id in ex.delivered:
                return self._complete(ex.delivered.pop(self.id))
            cancel = ex.refusing()
            if cancel is not None:
                raise cancel
            yield _WaitCommand(self.id)


async def _wrap(awaitable: Awaitable) -> Any:
    return await awaitable


def _children(awaitables: tuple) -> list:
    ex = current()
    return [ex.spawn(_wrap(a)) for a in awaitables]


class _Join:
    def __init__(self, awaitables: tuple, first: bool):
        self.awaitables = awaitables
        self.first = first

    def __await__(self):
        ex = current()
        tasks = _children(self.awaitables)
        if not tasks:
            return None if self.first else []
        yield _WaitTasks(tasks, self.first)
        if self.first:
            index = next(i for i, t in enumerate(tasks) if t.done)
            for t in tasks:
                if t is not tasks[index]:
                    ex.close(t)
            if tasks[index].error is not None:
                raise tasks[index].error
            return index, tasks[index].result
        failed = next((t for t in tasks if t.done and t.error is not None), None)
        if failed is not None:
            for t in tasks:
                ex.close(t)
            raise failed.error
        return [t.result for t in tasks]


def gather(*awaitables: Awaitable) -> Awaitable[list]:
    """Awaits all of ``awaitables`` concurrently (steps run in parallel) and
    returns their results in argument order. The first that fails stops the
    others and its error is raised.

    >>> receipt, reservation = await keel.gather(charge(order), reserve(order))
    """
    return _Join(awaitables, first=False)


def select(*awaitables: Awaitable) -> Awaitable[tuple]:
    """Awaits the first of ``awaitables`` to complete (in journal order) and
    returns ``(index, result)``; the others are stopped (a step already
    scheduled still runs; its result is not awaited).

    >>> index, value = await keel.select(hook.next(), keel.sleep(3600))
    """
    return _Join(awaitables, first=True)


class _Shield:
    def __init__(self, awaitable: Awaitable):
        self.awaitable = awaitable

    def __await__(self):
        ex = current()
        task = ex.spawn(_wrap(self.awaitable), shielded=True)
        yield _WaitTasks([task], first=False)
        if task.error is not None:
            raise task.error
        return task.result


def shield(awaitable: Awaitable) -> Awaitable:
    """Runs ``awaitable`` to its end even when the run is cancelled
    meanwhile: this is how a cancelled workflow cleans up, within the
    cancel grace.

    >>> try:
    ...     await charge(order)
    ... except keel.Cancelled:
    ...     await keel.shield(release(order))
    ...     raise
    """
    return _Shield(awaitable)
