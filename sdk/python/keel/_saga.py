"""Compensation: a workflow registers how to undo each step that took
effect, and on an error or a cancel the saga undoes them in reverse order,
each an ordinary journaled step (so each runs once, with a stable step ID,
and replays like any other), as ``keel_sdk::Saga`` does in Rust."""

from __future__ import annotations

from typing import Any, Awaitable, Callable, TypeVar, Union

from ._executor import current, shield
from .errors import Cancelled

__all__ = ["Saga"]

T = TypeVar("T")


class Saga:
    """The compensations of what a workflow did so far, run in reverse
    order when it fails or is cancelled.

    >>> saga = keel.Saga()
    >>> async with saga:
    ...     reservation = await saga.step(reserve(order), release)
    ...     charge = await saga.step(charge_user(order), lambda c: refund(order, c))
    ...     return Receipt(order.order_id, reservation, charge)

    On an error (a cancel included) the body raises, the registered
    compensations run in reverse order, each to its end whatever the cancel,
    and the body's error is raised again: the original error, with a
    compensation's failure noted on it.
    """

    def __init__(self) -> None:
        self._compensations: list = []

    async def step(self, step: Awaitable[T], compensation: Callable[[T], Awaitable[Any]]) -> T:
        """Awaits ``step`` to its end, even if the run is cancelled
        meanwhile (so that what it did is known), and once it completed
        registers ``compensation(its output)`` to undo it. Returns the
        step's output, or raises :class:`Cancelled` when the run was
        cancelled (before the step, which then never starts, or while it
        ran)."""
        refused = current().refusing()
        if refused is not None:
            raise refused
        output = await shield(step)
        self._compensations.append(lambda: compensation(output))
        refused = current().refusing()
        if refused is not None:
            raise refused
        return output

    def add(self, compensation: Union[Callable[[], Awaitable[Any]], Awaitable[Any]]) -> None:
        """Registers a compensation of something done outside
        :meth:`step`: a step's awaitable (``refund(order, charge_id)``), or a
        function making one when the saga compensates."""
        self._compensations.append(compensation if callable(compensation) else lambda: compensation)

    async def compensate(self) -> None:
        """Runs the registered compensations in reverse order of
        registration, each to its end whatever the run's cancel, and
        forgets them. Every one runs even if one before it failed; the first
        failure is raised."""
        compensations, self._compensations = self._compensations, []
        first = None
        for compensation in reversed(compensations):
            try:
                await shield(compensation())
            except Exception as e:  # noqa: BLE001 - every compensation runs
                first = first or e
        if first is not None:
            raise first

    async def run(self, body: Awaitable[T]) -> T:
        """Awaits ``body``; when it fails (a cancel included), compensates
        and raises the body's error, a compensation's failure noted on it."""
        try:
            return await body
        except Exception as failed:
            await self._undo(failed)
            raise

    async def __aenter__(self) -> "Saga":
        return self

    async def __aexit__(self, kind: Any, error: Any, traceback: Any) -> bool:
        if isinstance(error, Exception):
            await self._undo(error)
        return False

    async def _undo(self, failed: Exception) -> None:
        try:
            await self.compensate()
        except Cancelled:
            pass
        except Exception as e:  # noqa: BLE001 - noted on the original error
            failed.add_note(f"then a compensation failed: {e}")
