"""Example Python guest: ``process_order`` reserves the order's items, then
charges the user through a payment API, passing the step ID as the
``Idempotency-Key``, so a retried charge is recognised by the API and never
taken twice. If the run fails or is cancelled (``keel runs cancel RUN``)
after either took effect, a saga undoes them in reverse order: the charge
is refunded, then the reservation released, each an ordinary step that
runs once. At most four orders of one user are in progress at once (the
rest queue), and ``nightly_report`` runs at 02:00 in Berlin."""

import keel
from order_steps import Order, Receipt, charge_user, refund_charge, release_inventory, reserve_inventory


@keel.workflow(concurrency=keel.Concurrency("input.user_id", 4))
async def process_order(order: Order) -> Receipt:
    """Reserves the items, charges the user and returns the receipt."""
    saga = keel.Saga()
    async with saga:
        reservation_id = await saga.step(reserve_inventory(order), release_inventory)
        charge_id = await saga.step(charge_user(order), lambda charge: refund_charge(order, charge))
        return Receipt(order.order_id, reservation_id, charge_id)


@keel.step(max_retries=3, initial_backoff="100ms")
def report_for() -> str:
    """The night the report is for: the day of the fire's run (its run ID
    is ``SCHEDULE:YYYYMMDDTHHMMSSZ``)."""
    return keel.step_metadata().run_id.rpartition(":")[2][:8]


@keel.workflow(schedule=keel.Schedule(cron="0 2 * * *", tz="Europe/Berlin"))
async def nightly_report() -> str:
    """The orders' nightly report; each fire runs once across workers."""
    return await report_for()
