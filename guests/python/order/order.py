"""Example Python guest: ``process_order`` reserves the order's items, then
charges the user through a payment API, passing the step ID as the
``Idempotency-Key``, so a retried charge is recognised by the API and never
taken twice. If the run fails or is cancelled (``keel runs cancel RUN``)
after either took effect, they are undone in reverse order: the charge is
refunded, then the reservation released, each an ordinary step that runs
once."""

from typing import Any, Optional

import keel
from order_steps import Order, Receipt, charge_user, refund_charge, release_inventory, reserve_inventory


@keel.workflow
async def process_order(order: Order) -> Receipt:
    """Reserves the items, charges the user and returns the receipt."""
    reservation = reserve_inventory(order)
    charge = charge_user(order)
    try:
        reservation_id = await reservation
        charge_id = await charge
    except (keel.Cancelled, keel.StepFailed):
        await keel.shield(undo(order, reservation, charge))
        raise
    return Receipt(order.order_id, reservation_id, charge_id)


async def undo(order: Order, reservation: Any, charge: Any) -> None:
    """Refunds what the charge took, then releases what the reservation
    held: a step in flight at the cancel is awaited to its end first."""
    charge_id = await taken(charge)
    if charge_id is not None:
        await refund_charge(order, charge_id)
    reservation_id = await taken(reservation)
    if reservation_id is not None:
        await release_inventory(reservation_id)


async def taken(step: Any) -> Optional[str]:
    """What a step took: its result once it ends; None if it failed or
    was never scheduled."""
    if not step.scheduled:
        return None
    try:
        return await step
    except keel.StepFailed:
        return None
