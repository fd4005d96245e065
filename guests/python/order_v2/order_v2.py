"""A changed build of the Python ``order`` guest that replay must refuse:
``process_order`` charges before it reserves, so a journal recorded by
``order`` diverges at its first step."""

import keel
from order_steps import Order, Receipt, charge_user, reserve_inventory


@keel.workflow
async def process_order(order: Order) -> Receipt:
    """Charges first, then reserves."""
    charge_id = await charge_user(order)
    reservation_id = await reserve_inventory(order)
    return Receipt(order.order_id, reservation_id, charge_id)
