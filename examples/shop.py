"""A small shop: the worked example of docs/testing.md (retries, SkipRetry, a timeout, a batch, a chain).

Run it with ``conveyor worker examples.shop:app``; test it with ``conveyor_sdk.testing``.
"""

from __future__ import annotations

import asyncio

import msgspec

from conveyor_sdk.app import App
from conveyor_sdk.worker import SkipRetry, TaskContext

app = App()


class Order(msgspec.Struct):
    """Payload of every ``shop:*`` task."""

    order_id: int
    amount: int = 100


class PaymentDeclined(Exception):
    """The card was declined: retrying will not help."""


@app.task("shop:charge", max_retry=3)
async def charge(order: Order, ctx: TaskContext) -> str:
    """Charge the card. The gateway flakes on the first attempt of odd orders (retried)."""
    if order.amount <= 0:
        raise SkipRetry(f"order {order.order_id}: nothing to charge")
    if order.order_id % 2 == 1 and ctx.retried == 0:
        raise ConnectionError("payment gateway timed out")
    ctx.report_progress(100, "charged")
    return f"charged {order.amount}"


@app.task("shop:ship", max_retry=2)
def ship(order: Order, ctx: TaskContext) -> None:
    """Book a courier (runs after ``shop:charge`` through ``depends_on``)."""
    ctx.report_progress(50, f"courier booked for {order.order_id}")


@app.task("shop:invoice", max_retry=0, timeout=0.2)
async def invoice(order: Order, ctx: TaskContext) -> None:
    """Render the invoice; a slow renderer hits the timeout (never retried: ``max_retry=0``)."""
    await asyncio.sleep(order.amount / 1000)


@app.batch_task("shop:audit")
async def audit(orders: list[Order], ctx: TaskContext) -> None:
    """Record orders in the audit log, several per call."""
    for order, task_id in zip(orders, ctx.ids, strict=True):
        ctx.report_progress(100, f"audited {order.order_id}", task_id=task_id)


@app.task("shop:wait_for_stock")
async def wait_for_stock(order: Order, ctx: TaskContext) -> None:
    """Wait until stock arrives, or the task is cancelled."""
    await ctx.until_cancelled()
