"""Cross-SDK worker checks through the environment contract (any SDK's worker program).

Tasks are enqueued with max_retry 25 and retention 1 h, as the upstream suite does.
"""

from __future__ import annotations

import asyncio

from conveyor_conformance.checks._common import COMPLETED
from conveyor_conformance.checks._procs import start_worker
from conveyor_conformance.context import CheckContext, describe
from conveyor_conformance.model import CheckFailed, Requirement
from conveyor_conformance.registry import check
from conveyor_sdk._gen.conveyor.v1 import task_pb2 as tpb

ACTIVE = tpb.TASK_STATE_ACTIVE
NEEDS = [Requirement.WORKER_CMD]
NEEDS_SHORT = [Requirement.WORKER_CMD, Requirement.SHORT_LEASE]


@check(
    "worker.5.2.bad-hello-rejected-locally",
    section="5.2",
    description=(
        "BadHelloRejectedLocally: a zero queue weight is refused by the SDK before connecting (exit 1)."
    ),
    requires=NEEDS,
    timeout=45,
)
async def bad_hello(ctx: CheckContext) -> str:
    proc = await start_worker(ctx, addr=ctx.env.url, scenario="bad-hello")
    code = await proc.wait(ctx.t(30))
    ctx.expect(code is not None, "program still running 30 s after start")
    ctx.expect(
        code == 1, f"exit code {code}, want exactly 1 (2 = the SDK accepted the bad Hello); {proc.tail()}"
    )
    return "exit 1"


@check(
    "worker.5.6.long-task-keeps-lease",
    section="5.6",
    description="LongTaskKeepsLease: a 5 s handler under a 2 s lease completes with retried 0 (heartbeats).",
    requires=NEEDS_SHORT,
)
async def long_task(ctx: CheckContext) -> str:
    info = await ctx.enqueue(max_retry=25)
    proc = await start_worker(ctx, addr=ctx.env.url, sleep_ms=5000)
    done = await ctx.wait_task(
        info.id, lambda t: t.state == COMPLETED or t.retried > 0, "COMPLETED", within=40
    )
    if done.state != COMPLETED or done.retried != 0:
        raise CheckFailed(f"{_why_retried(done, ctx.lease_ttl)}: {describe(done)}; {proc.tail(3)}")
    return describe(done)


def _why_retried(info: tpb.TaskInfo, lease_ttl: float) -> str:
    """Say what happened to a task that was charged a retry, from the error the server stored."""
    err = info.last_error.lower()
    if "lease" in err or "expired" in err or "reclaim" in err:
        return "the task lost its lease (heartbeats did not extend it)"
    if "silent" in err:
        return "the task lost its lease (no heartbeats: the server closed the silent session)"
    if "deadline" in err or "timeout" in err or "timed out" in err or "cancel" in err:
        return (
            f"the worker cancelled the handler at its Dispatch.deadline (the {lease_ttl:g} s lease part) and "
            "reported RETRY, instead of keeping the lease alive with heartbeats"
        )
    return "the worker reported RETRY (or the lease lapsed) before the handler finished"


@check(
    "worker.5.11.batch-keeps-leases",
    section="5.11",
    description=(
        "BatchKeepsLeases: three members of group 'g' (handler longer than the lease) complete, retried 0."
    ),
    requires=NEEDS_SHORT,
)
async def batch_keeps(ctx: CheckContext) -> str:
    ids = [(await ctx.enqueue(type="conformance:batch", group="g", max_retry=25)).id for _ in range(3)]
    await start_worker(ctx, addr=ctx.env.url, sleep_ms=3000)
    for task_id in ids:
        got = await ctx.wait_task(
            task_id, lambda t: t.state == COMPLETED or t.retried > 0, "COMPLETED", within=40
        )
        if got.state != COMPLETED or got.retried != 0:
            raise CheckFailed(f"member {task_id}: {_why_retried(got, ctx.lease_ttl)}: {describe(got)}")
    return "3 members COMPLETED with retried 0"


@check(
    "worker.5.10.drain-releases-without-retry",
    section="5.10",
    description=(
        "DrainReleasesWithoutRetry: SIGTERM while a task is ACTIVE leaves it un-ACTIVE with retried 0 "
        "(the protocol outcome only; how long the program takes to exit is worker.5.10.drain-exits-cleanly)."
    ),
    requires=NEEDS,
    timeout=90,
)
async def drain_releases(ctx: CheckContext) -> str:
    info = await ctx.enqueue(max_retry=25)
    proc = await start_worker(ctx, addr=ctx.env.url, sleep_ms=30_000)
    await ctx.wait_task(info.id, lambda t: t.state == ACTIVE, "ACTIVE", within=30)
    proc.terminate()
    got = await ctx.wait_task(info.id, lambda t: t.state != ACTIVE, "not ACTIVE", within=45)
    ctx.expect(got.retried == 0, f"drain charged a retry: {describe(got)}; {proc.tail(3)}")
    # A server that reclaims silent sessions for free (ours) would hide a worker that stops
    # heartbeating while it drains; the reason it records gives that away.
    silent = "session went silent" in got.last_error
    ctx.expect(not silent, f"the server had to reclaim the silent session: {describe(got)}; {proc.tail(3)}")
    return describe(got)


@check(
    "worker.5.10.drain-exits-cleanly",
    section="5.10",
    description=(
        "SIGTERM while a 5 s task is ACTIVE: the program exits 0 within 20 s of its handler's end "
        "(beyond the upstream contract, which never checks exit time or code)."
    ),
    requires=NEEDS,
    timeout=90,
)
async def drain_exits(ctx: CheckContext) -> str:
    info = await ctx.enqueue(max_retry=25)
    proc = await start_worker(ctx, addr=ctx.env.url, sleep_ms=5000)
    await ctx.wait_task(info.id, lambda t: t.state == ACTIVE, "ACTIVE", within=30)
    loop = asyncio.get_running_loop()
    sigterm = loop.time()
    proc.terminate()
    code = await proc.wait(ctx.t(25))
    took = loop.time() - sigterm
    ctx.expect(code is not None, f"the program did not exit within 25 s of SIGTERM; {proc.tail(3)}")
    ctx.expect(code == 0, f"exit code {code} after SIGTERM, want 0; {proc.tail(3)}")
    return f"exit 0 {took:.1f}s after SIGTERM"
