"""Typed enqueue checks the payload against the declared type before sending; public enums print names."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any, TypedDict

import msgspec
import pytest

from conveyor_sdk._gen.conveyor.v1 import task_pb2 as tpb
from conveyor_sdk.app import App
from conveyor_sdk.client import Client, SyncClient, ValidationError
from conveyor_sdk.errors import InvalidArgument, NotFound
from conveyor_sdk.types import OnFailure, RetryStrategy, TaskState
from conveyor_sdk.worker import OutcomeKind, TaskContext


class Item(msgspec.Struct):
    sku: str
    qty: int


class Order(msgspec.Struct):
    order_id: int
    items: list[Item] = []


@dataclasses.dataclass
class Point:
    x: int
    y: int


class Movie(TypedDict):
    title: str
    year: int


app = App(tracing=False)


@app.task("shop:order", queue="typed-v")
async def order(payload: Order, ctx: TaskContext) -> None: ...


@app.task("geo:point", queue="typed-v")
def point(payload: Point, ctx: TaskContext) -> None: ...


@app.task("film:movie", queue="typed-v")
def movie(payload: Movie, ctx: TaskContext) -> None: ...


@app.task("free:any", queue="typed-v")
def anything(payload: Any, ctx: TaskContext) -> None: ...


@app.task("blob:bytes", queue="typed-v")
def blob(payload: bytes, ctx: TaskContext) -> None: ...


@app.task("pb:info", queue="typed-v")
def proto(payload: tpb.TaskOptions, ctx: TaskContext) -> None: ...


@pytest.mark.parametrize(
    ("definition", "payload", "path"),
    [
        (order, {"order_id": "x"}, "$.order_id"),
        (order, Order(order_id="nope"), "$.order_id"),  # type: ignore[arg-type]
        (order, {"order_id": 1, "items": [{"sku": "a", "qty": "many"}]}, "$.items[0].qty"),
        (order, {}, "$"),
        (point, Point(x=1, y="2"), "$.y"),  # type: ignore[arg-type]
        (movie, {"title": "Heat"}, "$"),
        (order, b'{"order_id": true}', "$.order_id"),  # pre-encoded bytes are checked too
    ],
)
def test_bad_payloads_raise_validation_error_with_the_path(definition: Any, payload: Any, path: str) -> None:
    """Wrong field types, missing fields and nested mistakes name the failing field."""
    with pytest.raises(ValidationError) as info:
        definition.encode(payload)
    err = info.value
    assert isinstance(err, InvalidArgument) and isinstance(err, ValueError)
    assert err.path == path and path in str(err) and definition.type in str(err)


def test_good_payloads_pass_and_untyped_ones_are_not_checked() -> None:
    """Valid values (objects or dicts) encode; Any, bytes and protobuf payloads skip the check."""
    assert order.encode({"order_id": 7}) == b'{"order_id":7}'  # a dict is sent as given
    assert order.encode(Order(7, [Item("a", 2)])) == b'{"order_id":7,"items":[{"sku":"a","qty":2}]}'
    assert point.encode(Point(1, 2)) == b'{"x":1,"y":2}'
    assert anything.encode({"whatever": [1]}) == b'{"whatever":[1]}'
    assert not anything.validates and not blob.validates and not proto.validates
    assert blob.encode(b"\x00") == b"\x00"


def test_enqueue_batch_and_tx_refuse_before_sending(url: str) -> None:
    """Nothing reaches the server: the bad single, the batch spec and the tx spec all raise first."""

    async def main() -> None:
        async with Client(url) as client:
            with pytest.raises(ValidationError, match=r"\$\.order_id"):
                await order.enqueue(client, {"order_id": "x"}, task_id="typed-bad-1")
            with pytest.raises(ValidationError):
                await client.enqueue_batch([order.spec({"order_id": 1}), order.spec({"order_id": "y"})])
            with pytest.raises(ValidationError):
                await client.enqueue_tx([order.spec(Order(order_id="z"), task_id="typed-bad-2")])  # type: ignore[arg-type]
            for task_id in ("typed-bad-1", "typed-bad-2"):
                with pytest.raises(NotFound):
                    await client.get_task(task_id)
            good = await order.enqueue(client, Order(order_id=5), task_id="typed-good-1")
            assert good.decode(Order) == Order(order_id=5)

    asyncio.run(main())
    with SyncClient(url) as sync, pytest.raises(ValidationError, match=r"\$\.order_id"):
        order.enqueue(sync, {"order_id": 1.5})


def test_public_enums_print_their_names() -> None:
    """print(info.state) shows TaskState.ACTIVE, not 3; numbers and reprs are unchanged."""
    assert str(TaskState.ACTIVE) == f"{TaskState.ACTIVE}" == "TaskState.ACTIVE"
    assert f"{TaskState.PENDING:>20}" == "   TaskState.PENDING"
    assert str(OnFailure.CASCADE_CANCEL) == "OnFailure.CASCADE_CANCEL"
    assert str(RetryStrategy.FIXED) == "RetryStrategy.FIXED"
    assert str(OutcomeKind.SKIP_RETRY) == "OutcomeKind.SKIP_RETRY"
    assert (
        TaskState.ACTIVE == 3
        and int(TaskState.ACTIVE) == 3
        and repr(TaskState.ACTIVE) == "<TaskState.ACTIVE: 3>"
    )
    assert msgspec.json.encode([TaskState.ACTIVE, OutcomeKind.RETRY]) == b"[3,2]"
