"""Server checks: a worker that goes silent while holding tasks, and where a reclaimed task goes.

The protocol document requires that a leased task come back when its worker stops answering (§5.6:
the lease lapses and the task is redelivered, charged a retry). It says nothing about a server
closing a silent session early, or about which worker gets a reclaimed task; the checks for those
are optional: the behaviour's absence is ``optional-fail`` (``OptionalAbsent``), never a failed run;
anything else going wrong (no Dispatch at all) is a plain failure. They need a ~2 s lease.
"""

from __future__ import annotations

import asyncio

from conveyor_conformance._session import RawSession, StreamEnded
from conveyor_conformance.checks._common import COMPLETED, SUCCESS
from conveyor_conformance.checks.server_leases import heartbeat_for
from conveyor_conformance.context import CheckContext
from conveyor_conformance.model import OptionalAbsent, Requirement
from conveyor_conformance.registry import check
from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb

__all__: list[str] = []


async def _silent_then_rescued(ctx: CheckContext) -> tuple[pb.Dispatch, float, RawSession]:
    """A session takes the check's task and sends nothing more; a second session waits for it.

    Returns the rescuer's Dispatch, how long after the first Dispatch it came, and the silent
    session (still to be looked at).
    """
    loop = asyncio.get_running_loop()
    info = await ctx.enqueue()
    silent, _ = await ctx.worker_session()
    first = await silent.expect("dispatch", ctx.t(10))
    ctx.expect(first.dispatch.task.id == info.id, "the silent session got an unexpected task")
    took = loop.time()
    rescuer, _ = await ctx.worker_session()
    msg = await rescuer.expect("dispatch", ctx.t(5 * ctx.lease_ttl + 10))
    ctx.expect(msg.dispatch.task.id == info.id, "the rescuer got an unexpected task")
    await rescuer.result(info.id, SUCCESS)
    await ctx.wait_task(info.id, lambda t: t.state == COMPLETED, "COMPLETED")
    return msg.dispatch, loop.time() - took, silent


@check(
    "server.5.6.silent-session-task-reclaimed",
    section="5.6",
    description=(
        "The task of a session that sends nothing at all after its Dispatch (no Heartbeat, no Result) "
        "comes back and runs on another session."
    ),
    requires=[Requirement.SHORT_LEASE],
)
async def silent_reclaimed(ctx: CheckContext) -> str:
    dispatch, after, _ = await _silent_then_rescued(ctx)
    return f"redelivered to another session {after:.1f}s later with retried {dispatch.task.retried}"


@check(
    "server.5.10.silent-session-closed-without-charge",
    section="5.10",
    description=(
        "OPTIONAL: a session holding a task that sends nothing for 3 heartbeat intervals is closed, and "
        "the task released with no retry charge (the §5.10 safety net) instead of lapsing (§5.6)."
    ),
    requires=[Requirement.SHORT_LEASE],
    optional=True,
)
async def silent_closed(ctx: CheckContext) -> str:
    dispatch, after, silent = await _silent_then_rescued(ctx)
    retried = dispatch.task.retried
    if retried:
        raise OptionalAbsent(
            f"redelivered {after:.1f}s later with retried {retried}: the lease lapsed and was charged "
            "(§5.6); the silent session was not closed first"
        )
    end = await silent.recv(ctx.t(2))
    if isinstance(end, StreamEnded):
        how = "clean end" if end.error is None else end.error.code.connect_name
    else:
        how = "still open" if end is None else f"still open (sent {end.WhichOneof('frame')})"
    if how.startswith("still open"):
        raise OptionalAbsent(f"released with retried 0, but the silent session's stream is {how}")
    return f"released {after:.1f}s after its Dispatch with retried 0; the silent stream ended ({how})"


@check(
    "server.5.6.reclaimed-task-goes-elsewhere",
    section="5.6",
    description=(
        "OPTIONAL: a task whose lease lapsed in a live session (heartbeats that never list it) goes to "
        "another session with a free slot, not back to the first, even when that one has more weight."
    ),
    requires=[Requirement.SHORT_LEASE],
    optional=True,
)
async def reclaimed_elsewhere(ctx: CheckContext) -> str:
    info = await ctx.enqueue()
    lapsing, _ = await ctx.worker_session(concurrency=2, queues={ctx.queue: 100})
    await lapsing.expect("dispatch", ctx.t(10))
    beat = asyncio.ensure_future(heartbeat_for(lapsing, [], ctx.heartbeat_interval, 60))
    other, _ = await ctx.worker_session(queues={ctx.queue: 1})
    waits = {
        asyncio.ensure_future(lapsing.expect("dispatch", ctx.t(5 * ctx.lease_ttl + 10))): "the same session",
        asyncio.ensure_future(other.expect("dispatch", ctx.t(5 * ctx.lease_ttl + 10))): "the other session",
    }
    try:
        done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        beat.cancel()
        for fut in waits:
            fut.cancel()
        await asyncio.gather(beat, *waits, return_exceptions=True)
    got = next(iter(done))
    msg = got.result()  # a CheckFailed here (no Dispatch at all) fails the check, as it should
    ctx.expect(msg.dispatch.task.id == info.id, "an unexpected task was dispatched")
    where = waits[got]
    if where == "the same session":
        raise OptionalAbsent(
            f"the reclaimed task (retried {msg.dispatch.task.retried}) went straight back to the session "
            "whose lease lapsed, while another session had a free slot"
        )
    return f"the reclaimed task (retried {msg.dispatch.task.retried}) went to {where}"
