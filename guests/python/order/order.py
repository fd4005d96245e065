"""Example Python guest: ``process_order`` reserves the order's items, then
charges the user through a payment API, passing the step ID as the
``Idempotency-Key``, so a retried charge is recognised by the API and never
taken twice. If the charge fails for good after the reservation, the
reservation is released (a compensating step)."""

import keel
from order_steps import Order, Receipt, charge_user, release_inventory, reserve_inventory


@keel.workflow
async def process_order(order: Order) -> Receipt:
    """Reserves the items, charges the user and returns the receipt."""
    reservation_id = await reserve_inventory(order)
    try:
        charge_id = await charge_user(order)
    except (keel.StepFailed, keel.Cancelled):
        await keel.shield(release_inventory(reservation_id))
        raise
    return Receipt(order.order_id, reservation_id, charge_id)
