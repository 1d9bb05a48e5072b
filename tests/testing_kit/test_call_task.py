"""call_task runs one handler with a constructed TaskContext, no server."""

from __future__ import annotations

import asyncio

import pytest

from conveyor_sdk.testing import call_task, call_task_async
from conveyor_sdk.worker import CancelReason, SkipRetry
from examples import shop
from examples.shop import Order


def test_returns_value_and_progress() -> None:
    """The return value and every report_progress call come back."""
    result = call_task(shop.charge, Order(2), task_id="t1")
    assert result.ok and result.value == "charged 100"
    assert [(p.task_id, p.percent, p.message) for p in result.progress] == [("t1", 100, "charged")]


def test_retried_count_reaches_the_handler() -> None:
    """retried= is what ctx.retried says: the first attempt of an odd order fails, the second passes."""
    assert isinstance(call_task(shop.charge, Order(1)).error, ConnectionError)
    assert call_task(shop.charge, Order(1), retried=1).ok


def test_raised_skip_retry_is_returned() -> None:
    """An exception comes back as .error, not raised."""
    assert isinstance(call_task(shop.charge, Order(2, amount=0)).error, SkipRetry)


def test_cancel_signal_already_fired() -> None:
    """cancel= fires the signal: a handler waiting on it returns at once."""
    result = call_task(shop.wait_for_stock, Order(1), cancel=CancelReason.SERVER_CANCEL)
    assert result.ok and result.context.cancelled


def test_bad_payload_is_rejected_like_an_enqueue() -> None:
    """A payload that does not match the type raises the enqueue ValidationError."""
    with pytest.raises(Exception, match="order_id"):
        call_task(shop.charge, {"order_id": "x"})


def test_async_variant_in_a_running_loop() -> None:
    """call_task_async awaits async handlers and runs sync ones in a thread."""

    async def main() -> None:
        assert (await call_task_async(shop.charge, Order(2))).value == "charged 100"
        shipped = await call_task_async(shop.ship, Order(4))
        assert shipped.ok and shipped.progress[0].message == "courier booked for 4"

    asyncio.run(main())


def test_batch_handler_gets_the_list() -> None:
    """A batch definition takes a list; progress is per member."""
    result = call_task(shop.audit, [Order(1), Order(2)])
    assert result.ok and [p.message for p in result.progress] == ["audited 1", "audited 2"]
