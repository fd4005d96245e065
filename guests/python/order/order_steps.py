"""The Python ``order`` guests' types and steps, shared by ``order`` and
its changed build ``order_v2`` (as the Rust guests share ``steps.rs``)."""

from dataclasses import dataclass

import keel


@dataclass
class Order:
    order_id: str
    user_id: str
    amount: int
    payment_url: str


@dataclass
class Receipt:
    order_id: str
    reservation_id: str
    charge_id: str


@keel.step(max_retries=3, initial_backoff="100ms")
async def reserve_inventory(order: Order) -> str:
    """Reserves the order's items; returns a reservation ID."""
    return f"res-{order.order_id}"


@keel.step(max_retries=3, initial_backoff="100ms")
async def charge_user(order: Order) -> str:
    """Charges the order's amount; the step ID makes the charge idempotent."""
    meta = keel.step_metadata()
    response = await keel.http.post(
        order.payment_url,
        json={"user_id": order.user_id, "amount": order.amount, "order_id": order.order_id},
        headers={"Idempotency-Key": meta.step_id, "Keel-Attempt": str(meta.attempt)},
    )
    if response.status >= 500:
        raise keel.RetryableError(f"payment API answered {response.status}: {response.text}")
    if not response.ok:
        raise keel.FatalError(f"payment API refused the charge ({response.status}): {response.text}")
    charge_id = response.json().get("charge_id")
    if not isinstance(charge_id, str):
        raise keel.FatalError(f"payment API answered without a charge_id: {response.text}")
    return charge_id


@keel.step(max_retries=5, initial_backoff="100ms")
async def refund_charge(order: Order, charge_id: str) -> None:
    """Refunds ``charge_id`` through the payment API's ``/refund``; the
    step ID is its ``Idempotency-Key``, so a retried refund is refunded
    once."""
    base, _, _ = order.payment_url.rpartition("/")
    if not base:
        raise keel.FatalError("the payment URL has no path")
    response = await keel.http.post(
        f"{base}/refund",
        json={"charge_id": charge_id, "order_id": order.order_id},
        headers={"Idempotency-Key": keel.step_metadata().step_id},
    )
    if response.status >= 500:
        raise keel.RetryableError(f"refund answered {response.status}")
    if not response.ok:
        raise keel.FatalError(f"refund refused ({response.status})")


@keel.step(max_retries=3, initial_backoff="100ms")
async def release_inventory(reservation_id: str) -> str:
    """Releases a reservation."""
    return reservation_id
