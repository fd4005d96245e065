"""Example Python guest for run idempotency and hooks, a port of the Rust
``order-hooks`` guest: an order that takes follow-up notes through its
start hook, a duplicate start refused with the owner's run ID, a wait on a
note or a timeout, and request/reply on a hook."""

from dataclasses import dataclass
from typing import Any, Optional

import keel


@dataclass
class OrderNote:
    """An order and its first note."""

    order_id: str
    note: str


@dataclass
class OrderUpdate:
    """A follow-up delivered to an order's hook."""

    note: str
    done: bool = False


def order_token(order_id: str) -> str:
    return f"order:{order_id}"


@keel.step
async def record_note(order_id: str, note: str) -> str:
    """Records a note of an order (here: returns it, as a store would)."""
    return note


@keel.step
async def forward_to_owner(token: str, payload: Any) -> str:
    """Delivers a request to the run that owns the token."""
    return keel.resume_hook(token, payload)


@keel.workflow
async def order_updates(order: OrderNote) -> list[str]:
    """Records the first note, then every note resumed into the hook
    ``order:{order_id}`` (the run's start token, when it was started with
    one) until one is ``done``; returns the notes in order."""
    notes = [await record_note(order.order_id, order.note)]
    updates = keel.create_hook(OrderUpdate, order_token(order.order_id))
    async for update in updates:
        notes.append(await record_note(order.order_id, update.note))
        if update.done:
            return notes
    return notes


@keel.workflow
async def note_or_timeout(order: OrderNote) -> str:
    """Waits for one note on the order's hook, or 30 seconds."""
    with keel.create_hook(OrderUpdate, order_token(order.order_id)) as hook:
        index, value = await keel.select(hook.next(), keel.sleep(30))
        return value.note if index == 0 else "timeout"


@keel.workflow
async def start_order(order: OrderNote) -> dict:
    """Starts ``order_updates`` for the order with its token, as a child run
    that goes on after this one ends; returns the child's run ID, or the run
    that holds the token."""
    try:
        child = await keel.start(order_updates, order, token=order_token(order.order_id), close="abandon")
        return {"started": child.run_id}
    except keel.HookConflict as e:
        return {"owner": e.conflicting_run_id}


@keel.workflow
async def open_twice(order: OrderNote) -> dict:
    """Opens the order's hook twice; the second registers nothing, since a
    token is held by one active hook at a time."""
    first = keel.create_hook(OrderUpdate, order_token(order.order_id))
    second = keel.create_hook(OrderUpdate, order_token(order.order_id))
    first.dispose()
    return {"second_held_by": second.conflict}


@dataclass
class Question:
    text: str


@keel.workflow
async def answer_questions(order: OrderNote) -> int:
    """Answers each question resumed into ``ask:{order_id}`` with its
    length, until one is empty: request/reply on a hook."""
    answered = 0
    with keel.create_hook(Question, f"ask:{order.order_id}") as questions:
        while True:
            question, reply = await questions.next_request()
            if not question.text:
                reply.send({"answered": answered})
                return answered
            reply.send({"length": len(question.text)})
            answered += 1


@keel.workflow
async def fan_out(order: OrderNote) -> list[str]:
    """Records three notes concurrently; their results come back in
    argument order whatever order they finished in."""
    return await keel.gather(*(record_note(order.order_id, f"{order.note} {i}") for i in range(3)))


@keel.workflow
async def relay(target: dict) -> Optional[str]:
    """Forwards ``target["payload"]`` to the hook ``target["token"]`` from a
    step; returns the run that got it."""
    return await forward_to_owner(target["token"], target["payload"])
