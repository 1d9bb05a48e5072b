"""Server checks: each Result outcome -> the specified state and retried count (§5.8, §5.10)."""

from __future__ import annotations

from conveyor_conformance.checks._common import (
    ARCHIVED,
    COMPLETED,
    PENDING,
    RETRY,
    SKIP_RETRY,
    SUCCESS,
    expect_free_redelivery,
)
from conveyor_conformance.context import CheckContext, describe
from conveyor_conformance.registry import check
from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._gen.conveyor.v1 import task_pb2 as tpb

RETRY_STATE = tpb.TASK_STATE_RETRY


async def _run_once(ctx: CheckContext, outcome: int, msg: str = "", **fields: object) -> pb.TaskInfo:
    """Enqueue, take the Dispatch on a session, send ``outcome``, close the session cleanly."""
    info = await ctx.enqueue(**fields)
    sess, _ = await ctx.worker_session()
    got = await sess.expect("dispatch", ctx.t(10))
    ctx.expect(got.dispatch.task.id == info.id, "dispatched an unexpected task")
    await sess.result(info.id, outcome, msg)
    await sess.close_send()
    await sess.expect_end(ctx.t(10))
    return info


@check(
    "server.5.8.outcome-success-completes",
    section="5.8",
    description="Result SUCCESS marks the task COMPLETED with retried unchanged.",
)
async def outcome_success(ctx: CheckContext) -> str:
    info = await _run_once(ctx, SUCCESS)
    got = await ctx.wait_task(info.id, lambda t: t.state == COMPLETED, "COMPLETED")
    ctx.expect(got.retried == 0, f"retried {got.retried} after SUCCESS")
    ctx.expect(got.HasField("completed_at"), "completed_at not set on a COMPLETED task")
    return describe(got)


@check(
    "server.5.8.outcome-retry-requeues",
    section="5.8",
    description="Result RETRY with retries left re-queues with retried+1 and stores error_msg.",
)
async def outcome_retry(ctx: CheckContext) -> str:
    info = await _run_once(ctx, RETRY, "boom: transient")
    got = await ctx.wait_task(info.id, lambda t: t.retried == 1, "retried 1")
    ctx.expect(got.state in (RETRY_STATE, PENDING), f"unexpected state after RETRY: {describe(got)}")
    ctx.expect("boom: transient" in got.last_error, f"last_error {got.last_error!r} lacks error_msg")
    return describe(got)


@check(
    "server.5.8.outcome-retry-exhausted-archives",
    section="5.8",
    description="Result RETRY when retried >= max_retry archives (dead-letters) the task.",
)
async def outcome_retry_exhausted(ctx: CheckContext) -> str:
    info = await ctx.enqueue(max_retry=1)
    sess, _ = await ctx.worker_session()
    for attempt in range(2):
        got = await sess.expect("dispatch", ctx.t(30))
        ctx.expect(got.dispatch.task.id == info.id, "dispatched an unexpected task")
        ctx.expect(
            got.dispatch.task.retried == attempt, f"attempt {attempt} has retried {got.dispatch.task.retried}"
        )
        await sess.result(info.id, RETRY, f"fail {attempt}")
    done = await ctx.wait_task(info.id, lambda t: t.state == ARCHIVED, "ARCHIVED")
    return describe(done)


@check(
    "server.5.8.outcome-skip-retry-archives",
    section="5.8",
    description="Result SKIP_RETRY archives immediately with error_msg and no retry charged.",
)
async def outcome_skip_retry(ctx: CheckContext) -> str:
    info = await _run_once(ctx, SKIP_RETRY, "permanent: bad input")
    got = await ctx.wait_task(info.id, lambda t: t.state == ARCHIVED, "ARCHIVED")
    ctx.expect(got.retried == 0, f"retried {got.retried} after SKIP_RETRY")
    ctx.expect("permanent: bad input" in got.last_error, f"last_error {got.last_error!r} lacks error_msg")
    return describe(got)


@check(
    "server.5.8.outcome-released-requeues-free",
    section="5.8",
    description="Result RELEASED re-queues the task due now with retried unchanged.",
)
async def outcome_released(ctx: CheckContext) -> str:
    info = await ctx.enqueue()
    sess, _ = await ctx.worker_session()
    await sess.expect("dispatch", ctx.t(10))
    await sess.result(info.id, pb.TASK_OUTCOME_RELEASED)
    await expect_free_redelivery(ctx, sess, info.id, "RELEASED")
    return "redelivered at once with retried 0"


@check(
    "server.5.8.outcome-unspecified-treated-as-released",
    section="5.8",
    description="Result with outcome UNSPECIFIED (0) is treated defensively as RELEASED.",
    divergence="§15.2: conveyord ends the session with invalid_argument instead",
)
async def outcome_unspecified(ctx: CheckContext) -> str:
    info = await ctx.enqueue()
    sess, _ = await ctx.worker_session()
    await sess.expect("dispatch", ctx.t(10))
    await sess.result(info.id, pb.TASK_OUTCOME_UNSPECIFIED)
    await expect_free_redelivery(ctx, sess, info.id, "UNSPECIFIED")
    return "treated as RELEASED: redelivered on the same session with retried 0"


@check(
    "server.5.10.stream-close-releases-without-charge",
    section="5.10",
    description="Closing the stream releases its leased tasks for immediate redelivery with no retry charge.",
)
async def close_releases(ctx: CheckContext) -> str:
    info = await ctx.enqueue()
    sess, _ = await ctx.worker_session()
    await sess.expect("dispatch", ctx.t(10))
    await sess.close_send()
    await sess.expect_end(ctx.t(10))
    got = await ctx.wait_task(info.id, lambda t: t.state == PENDING, "PENDING after close")
    ctx.expect(got.retried == 0, f"stream close charged a retry: {describe(got)}")
    again, _ = await ctx.worker_session()
    msg = await again.expect("dispatch", ctx.t(10))
    ctx.expect(msg.dispatch.task.id == info.id and msg.dispatch.task.retried == 0, "redelivery mismatch")
    return "PENDING with retried 0, redelivered to the next session"


@check(
    "server.5.10.abrupt-disconnect-releases",
    section="5.10",
    description="An abrupt disconnect (stream reset) also releases leased tasks with no retry charge.",
)
async def abrupt_disconnect(ctx: CheckContext) -> str:
    info = await ctx.enqueue()
    sess, _ = await ctx.worker_session()
    await sess.expect("dispatch", ctx.t(10))
    await sess.abort()
    got = await ctx.wait_task(info.id, lambda t: t.state == PENDING, "PENDING after reset")
    ctx.expect(got.retried == 0, f"disconnect charged a retry: {describe(got)}")
    return describe(got)
