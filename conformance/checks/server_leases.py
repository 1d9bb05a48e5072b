"""Server checks: leases, heartbeats and lease expiry (§5.6). These need a ~2 s lease."""

from __future__ import annotations

import asyncio
import time

from conveyor_conformance._session import RawSession
from conveyor_conformance.checks._common import COMPLETED, SUCCESS, dur, seconds
from conveyor_conformance.context import CheckContext, describe
from conveyor_conformance.model import Requirement
from conveyor_conformance.registry import check
from conveyor_sdk._gen.conveyor.v1 import task_pb2 as tpb

ACTIVE = tpb.TASK_STATE_ACTIVE


async def heartbeat_for(sess: RawSession, ids: list[str], interval: float, duration: float) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + duration
    while loop.time() < end:
        await sess.heartbeat(ids)
        await asyncio.sleep(interval)


@check(
    "server.5.6.heartbeats-extend-leases",
    section="5.6",
    description="A task listed in every Heartbeat keeps its lease past lease_ttl (ACTIVE, retried 0).",
    requires=[Requirement.SHORT_LEASE],
)
async def heartbeats_extend(ctx: CheckContext) -> str:
    info = await ctx.enqueue()
    sess, _ = await ctx.worker_session()
    await sess.expect("dispatch", ctx.t(10))
    await heartbeat_for(sess, [info.id], ctx.heartbeat_interval, 3 * ctx.lease_ttl)
    got = await ctx.api.get_task(info.id)
    ctx.expect(
        got.state == ACTIVE and got.retried == 0, f"after 3 x lease_ttl of heartbeats: {describe(got)}"
    )
    await sess.result(info.id, SUCCESS)
    done = await ctx.wait_task(info.id, lambda t: t.state == COMPLETED, "COMPLETED")
    ctx.expect(done.retried == 0, f"retried {done.retried}")
    return f"kept for {3 * ctx.lease_ttl:g}s by heartbeats, then COMPLETED with retried 0"


@check(
    "server.5.6.omitted-from-heartbeat-is-reclaimed",
    section="5.6",
    description=(
        "An in-flight task left out of Heartbeats is reclaimed when its lease lapses; listed ones are kept."
    ),
    requires=[Requirement.SHORT_LEASE],
)
async def omitted_reclaimed(ctx: CheckContext) -> str:
    kept = await ctx.enqueue()
    dropped = await ctx.enqueue()
    sess, _ = await ctx.worker_session(concurrency=2)
    for _ in range(2):
        await sess.expect("dispatch", ctx.t(10))
    beat = asyncio.ensure_future(heartbeat_for(sess, [kept.id], ctx.heartbeat_interval, 60))
    try:
        lost = await ctx.wait_task(dropped.id, lambda t: t.retried >= 1, "reclaimed (retried 1)", within=20)
        still = await ctx.api.get_task(kept.id)
    finally:
        beat.cancel()
        await asyncio.gather(beat, return_exceptions=True)
    ctx.expect(
        still.state == ACTIVE and still.retried == 0, f"heartbeated task lost its lease: {describe(still)}"
    )
    return f"omitted: {describe(lost)}; listed: {describe(still)}"


@check(
    "server.5.6.lease-expiry-redelivers-with-charge",
    section="5.6",
    description=(
        "A lease that lapses without Result (its session heartbeats, never listing it) is redelivered "
        "with retried+1."
    ),
    requires=[Requirement.SHORT_LEASE],
)
async def lease_expiry(ctx: CheckContext) -> str:
    info = await ctx.enqueue()
    dead, _ = await ctx.worker_session()
    await dead.expect("dispatch", ctx.t(10))
    # Empty heartbeats: the session is alive, so a server that closes silent sessions (optional,
    # server.5.10.silent-session-closed-without-charge) still lets this lease lapse.
    beat = asyncio.ensure_future(heartbeat_for(dead, [], ctx.heartbeat_interval, 60))
    try:
        rescuer, _ = await ctx.worker_session()
        msg = await rescuer.expect("dispatch", ctx.t(20))
    finally:
        beat.cancel()
        await asyncio.gather(beat, return_exceptions=True)
    ctx.expect(msg.dispatch.task.id == info.id, "rescuer got an unexpected task")
    ctx.expect(
        msg.dispatch.task.retried == 1, f"redelivered with retried {msg.dispatch.task.retried}, want 1"
    )
    await rescuer.result(info.id, SUCCESS)
    await ctx.wait_task(info.id, lambda t: t.state == COMPLETED, "COMPLETED")
    return "redelivered to another session with retried 1 after the lease lapsed"


@check(
    "server.5.4.dispatch-deadline-bounded-by-lease",
    section="5.4",
    description="Dispatch.deadline = min(lease expiry, task deadline, now + timeout).",
)
async def dispatch_deadline(ctx: CheckContext) -> str:
    plain = await ctx.enqueue()
    timed = await ctx.enqueue(timeout=dur(0.5))
    sess, _ = await ctx.worker_session(concurrency=2)
    deadlines = {}
    for _ in range(2):
        msg = await sess.expect("dispatch", ctx.t(10))
        task = msg.dispatch.task
        # relative to the task's own server-clock timestamps when present (skew-free), else ours
        base = seconds(task.enqueued_at) if task.HasField("enqueued_at") else time.time()
        deadlines[task.id] = seconds(msg.dispatch.deadline) - base
    slack = 2.0  # enqueue-to-lease latency
    ctx.expect(
        0 < deadlines[plain.id] <= ctx.lease_ttl + slack, f"plain deadline in {deadlines[plain.id]:.2f}s"
    )
    ctx.expect(0 < deadlines[timed.id] <= 0.5 + slack, f"timeout 0.5s deadline in {deadlines[timed.id]:.2f}s")
    ctx.expect(deadlines[timed.id] < deadlines[plain.id], "the timeout did not tighten Dispatch.deadline")
    plain_in, timed_in = deadlines[plain.id], deadlines[timed.id]
    return f"plain +{plain_in:.2f}s (lease {ctx.lease_ttl:g}s), timeout 0.5s -> +{timed_in:.2f}s"
