"""SDK checks (§9), session side: opening, Hello/Welcome, heartbeats, Ping, reconnection, fatal errors.

Each runs the worker program (default ``conveyor conformance worker``, our SDK's
Worker) against a ScriptedPeer that plays the server frame by frame and can do
on demand what a real server cannot (Ping, transient and fatal stream ends).
"""

from __future__ import annotations

import asyncio
import itertools
import re
import statistics
from typing import TYPE_CHECKING

from conveyor_conformance.checks._peer import (
    Conversation,
    has_result,
    open_conversation,
    ready_conversation,
    slots,
)
from conveyor_conformance.checks._procs import start_worker
from conveyor_conformance.context import CheckContext
from conveyor_conformance.model import CheckFailed, Requirement
from conveyor_conformance.registry import check
from conveyor_sdk.errors import Code

if TYPE_CHECKING:
    from conveyor_sdk.testing import ScriptedPeer

NEEDS = [Requirement.WORKER_CMD]
_QUEUE_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9-_.]*$")


@check(
    "sdk.9.opens-h2-session-with-bearer",
    section="9",
    requires=NEEDS,
    description=(
        "Opens the session over HTTP/2 at /conveyor.v1.WorkerService/Session with Authorization: Bearer."
    ),
)
async def opens_session(ctx: CheckContext) -> str:
    conv = await open_conversation(ctx, extra={"CONVEYOR_TOKEN": "cf-secret"})
    await conv.accept()
    sess = conv.sess
    headers = sess.headers
    ctx.expect(headers.get(":path") == "/conveyor.v1.WorkerService/Session", f"path {headers.get(':path')}")
    ctx.expect(headers.get(":method") == "POST", f"method {headers.get(':method')}")
    wire = f"HTTP/2 stream, {sess.protocol} ({sess.content_type})"
    ctx.need("CONVEYOR_TOKEN", f"{wire} verified; the bearer token could not be")
    ctx.expect(
        headers.get("authorization") == "Bearer cf-secret", f"authorization {headers.get('authorization')!r}"
    )
    return f"{wire}, Bearer token sent"


@check(
    "sdk.9.hello-first-with-valid-fields",
    section="9",
    requires=NEEDS,
    description=(
        "Sends Hello first with >= 1 valid queue, positive weights, positive concurrency and sdk_version."
    ),
)
async def hello_first(ctx: CheckContext) -> str:
    conv = await open_conversation(ctx, concurrency=3)
    hello = await conv.accept()
    ctx.expect(dict(hello.queues).get(ctx.queue, 0) > 0, f"queues {dict(hello.queues)} lack {ctx.queue} > 0")
    ctx.expect(all(w > 0 for w in hello.queues.values()), "a queue weight is not positive")
    ctx.expect(all(_QUEUE_NAME.match(q) for q in hello.queues), f"invalid queue name in {list(hello.queues)}")
    ctx.expect(hello.concurrency > 0, f"concurrency {hello.concurrency}")
    if ctx.declares("CONCURRENCY"):
        ctx.expect(hello.concurrency == 3, f"concurrency {hello.concurrency}, want 3 (CONCURRENCY=3)")
    ctx.expect(hello.sdk_version, "sdk_version is empty")
    return f"queues={dict(hello.queues)} concurrency={hello.concurrency} sdk_version={hello.sdk_version!r}"


@check(
    "sdk.9.waits-for-welcome",
    section="9",
    requires=NEEDS,
    description=(
        "Sends nothing after Hello until Welcome, then works (no work before the session is established)."
    ),
)
async def waits_for_welcome(ctx: CheckContext) -> str:
    conv = await open_conversation(ctx)
    await conv.accept()
    try:
        early = await conv.sess.recv(timeout=ctx.t(1.5))
    except TimeoutError:
        early = None
    ctx.expect(early is None, f"sent {early.WhichOneof('frame') if early else ''} before Welcome")
    await conv.welcome()
    await conv.dispatch("t-1")
    await conv.until(has_result("t-1"), "Result after Welcome")
    return "silent for 1.5 s before Welcome; Result after it"


@check(
    "sdk.9.heartbeat-interval-from-welcome",
    section="9",
    requires=NEEDS,
    description="Drives heartbeats from Welcome.heartbeat_interval (0.3 s here, not a hard-coded value).",
)
async def heartbeat_interval(ctx: CheckContext) -> str:
    conv = await ready_conversation(ctx, sleep_ms=2500)
    await conv.dispatch("t-hb")
    await conv.until(has_result("t-hb"), "Result", within=15)
    times = [t for t, _ in conv.seen.of("heartbeat")]
    ctx.expect(len(times) >= 4, f"{len(times)} heartbeats during a 2.5 s task with a 0.3 s interval")
    gap = statistics.median(b - a for a, b in itertools.pairwise(times))
    ctx.expect(0.1 <= gap <= 0.8, f"median heartbeat gap {gap:.2f}s for heartbeat_interval 0.3s")
    return f"{len(times)} heartbeats, median gap {gap:.2f}s"


@check(
    "sdk.9.heartbeats-every-inflight-id",
    section="9",
    requires=NEEDS,
    description="Every Heartbeat lists every in-flight task id, batch members included.",
)
async def heartbeats_every_id(ctx: CheckContext) -> str:
    conv = await ready_conversation(ctx, sleep_ms=2500, concurrency=3)
    singles = [f"t-{i}" for i in range(slots(conv, 3) - 1)]  # the batch takes one slot
    for task_id in singles:
        await conv.dispatch(task_id)
    await conv.batch(["m-1", "m-2"])
    want = {*singles, "m-1", "m-2"}
    await conv.until(lambda s: all(r in s.results() for r in want), "Results for all", within=20)
    first_result = min(t for t, m in conv.seen.frames if m.WhichOneof("frame") in ("result", "batch_result"))
    beats = [set(m.heartbeat.active_task_ids) for t, m in conv.seen.of("heartbeat") if t < first_result]
    ctx.expect(len(beats) >= 3, f"only {len(beats)} heartbeats before the first Result")
    missing = [sorted(want - b) for b in beats[1:] if not want <= b]
    ctx.expect(not missing, f"heartbeats omitted in-flight ids: {missing[:3]}")
    return f"{len(beats)} heartbeats each listed all {len(want)} ids"


@check(
    "sdk.9.tolerates-ping",
    section="9",
    requires=NEEDS,
    description="Tolerates Ping without replying and keeps the session working.",
)
async def tolerates_ping(ctx: CheckContext) -> str:
    from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb

    conv = await ready_conversation(ctx)
    for _ in range(3):
        await conv.send(pb.ServerMessage(ping=pb.Ping()))
    await conv.dispatch("t-after-ping")
    await conv.until(has_result("t-after-ping"), "Result after Ping")
    kinds = {m.WhichOneof("frame") for _, m in conv.seen.frames}
    ctx.expect(kinds <= {"result", "heartbeat", "progress"}, f"unexpected frames after Ping: {kinds}")
    ctx.expect(
        not conv.seen.closed and conv.peer.sessions_opened == 1, "session closed or reopened after Ping"
    )
    return "3 Pings ignored; Dispatch served on the same session"


async def _reconnect_gaps(conv: Conversation, failures: int, code: Code) -> list[float]:
    """Reject ``failures`` streams in a row; return the gaps between attempts."""
    loop = asyncio.get_running_loop()
    stamps: list[float] = []
    for _ in range(failures):
        conv.peer.reject_next(code, "conformance: go away")
    opened = conv.peer.sessions_opened
    while len(stamps) < failures + 1:
        now_opened = conv.peer.sessions_opened
        if now_opened > opened:
            stamps.extend([loop.time()] * (now_opened - opened))
            opened = now_opened
        if loop.time() - (stamps[-1] if stamps else loop.time()) > 40:
            raise CheckFailed("the worker stopped reconnecting")
        await asyncio.sleep(0.01)
    return [b - a for a, b in itertools.pairwise(stamps)]


JITTER_STARTS = 12  # fresh program starts x 3 reconnects each: 36 delays
JITTER_SLACK = 0.3  # seconds a delay may exceed its ceiling (connect time, scheduling) before it counts
JITTER_OUTLIERS = 2  # delays over the ceiling tolerated as stalls of a loaded machine
JITTER_MIN_LOW = 4  # delays below half their ceiling required (full jitter puts half of them there)


async def _jitter_run(ctx: CheckContext, peer: ScriptedPeer) -> list[tuple[float, float]]:
    """Start the program with its first 3 attempts rejected: three (delay, ceiling) samples, n = 0, 1, 2."""
    base = peer.sessions_opened
    for _ in range(3):
        peer.reject_next(Code.UNAVAILABLE, "conformance: go away")
    proc = await start_worker(ctx, addr=peer.url)
    loop = asyncio.get_running_loop()
    start = loop.time()
    while peer.sessions_opened < base + 4:
        if loop.time() - start > ctx.t(40):
            raise CheckFailed(f"the worker stopped reconnecting; {proc.tail(3)}")
        await asyncio.sleep(0.01)
    # Its delays are measured; how it stops is the shutdown checks' business. A graceful stop here waits
    # for a session that will never be welcomed (10 s per start for our SDK worker: 2 min per run).
    proc.proc.kill()
    await proc.aclose()
    stamps = [s.opened_at for s in peer.streams[base : base + 4]]
    return [(b - a, 0.5 * 2**n) for n, (a, b) in enumerate(itertools.pairwise(stamps))]


@check(
    "sdk.9.reconnects-with-full-jitter",
    section="5.9",
    requires=NEEDS,
    timeout=240,
    description=(
        "Reconnects after transient errors with delays uniform in [0, min(30s, 0.5s * 2^n)): 36 delays "
        "(n = 0, 1, 2 from 12 fresh starts); fails on 3+ above the ceiling or fewer than 4 below half of it."
    ),
)
async def reconnect_jitter(ctx: CheckContext) -> str:
    """Statistical verdict over 36 delays: 12 program starts, each with its first 3 attempts rejected.

    Delay n (0-based) is the gap between failed attempt n and the next attempt, so its ceiling is
    0.5 s * 2^n. A delay counts as *over* when it exceeds its ceiling by more than JITTER_SLACK (scaled
    by --timing-scale); two overs are tolerated (stalls of a loaded machine). Full jitter puts about
    half of the delays below half their ceiling; fewer than 4 of 36 means no (or only partial) jitter.
    For a backoff whose ceiling doubles once too often (uniform in [0, 0.5 s * 2^(n+1))) the chance of
    a miss (false negative) is 9.3e-5 per run, counting no overhead (overhead only makes such delays
    longer); for a correct SDK the chance of a false "no jitter" is about 1e-6 (binomial tails).
    Fresh starts matter: a counter that starts one step high only shows before the first Welcome
    (after one, the reset is sdk.9.reconnect-counter-resets-after-welcome's business).
    """
    from conveyor_sdk.testing import ScriptedPeer

    peer = ScriptedPeer()
    await peer.__aenter__()
    ctx.on_close(peer.aclose)
    samples: list[tuple[float, float]] = []
    for _ in range(JITTER_STARTS):
        samples += await _jitter_run(ctx, peer)
    slack = ctx.t(JITTER_SLACK)
    over = [(round(g, 2), c) for g, c in samples if g > c + slack]
    low = [g for g, c in samples if g < c / 2]
    n = len(samples)
    ctx.expect(
        len(over) <= JITTER_OUTLIERS, f"{len(over)} of {n} delays above the full-jitter ceiling: {over[:6]}"
    )
    ctx.expect(
        len(low) >= JITTER_MIN_LOW, f"only {len(low)} of {n} delays below half the ceiling: no full jitter"
    )
    mean = statistics.fmean(g / c for g, c in samples)
    return f"{n} delays, {len(low)} below half the ceiling, mean delay/ceiling {mean:.2f}"


@check(
    "sdk.9.reconnect-counter-resets-after-welcome",
    section="9",
    requires=NEEDS,
    timeout=90,
    description="The reconnect failure counter resets once a Welcome arrives.",
)
async def reconnect_reset(ctx: CheckContext) -> str:
    conv = await open_conversation(ctx)
    await _reconnect_gaps(conv, 3, Code.UNAVAILABLE)
    loop = asyncio.get_running_loop()
    gaps = []
    for _ in range(2):
        await conv.accept()
        await conv.welcome()
        ended = loop.time()
        await conv.sess.end(Code.UNAVAILABLE, "conformance: flap")
        opened = conv.peer.sessions_opened
        while conv.peer.sessions_opened == opened:
            await asyncio.sleep(0.01)
            if loop.time() - ended > 20:
                raise CheckFailed("no reconnect after a transient end")
        gaps.append(loop.time() - ended)
    ctx.expect(
        all(g < 0.5 + 1.0 for g in gaps), f"gaps after Welcome {gaps}: counter not reset (ceiling 0.5 s)"
    )
    return "gaps after Welcome " + ", ".join(f"{g:.2f}s" for g in gaps)


async def _fatal(ctx: CheckContext, code: Code, message: str, after_welcome: bool) -> str:
    conv = await open_conversation(ctx)
    if not after_welcome:
        conv.peer.reject_next(code, message)
    await conv.until_opened(1, within=30)  # the 4 s watch starts at the error, not at program start
    if after_welcome:
        await conv.accept()
        await conv.welcome()
        await conv.sess.end(code, message)
    loop = asyncio.get_running_loop()
    end = loop.time() + ctx.t(4)
    while loop.time() < end:
        if conv.peer.sessions_opened > 1:
            raise CheckFailed(f"reconnected after {code.connect_name}")
        await asyncio.sleep(0.05)
    return f"no reconnect within 4 s of {code.connect_name}"


@check(
    "sdk.9.stops-on-fatal-unauthenticated",
    section="9",
    requires=NEEDS,
    description="Stops (never reconnects) after unauthenticated.",
)
async def fatal_unauth(ctx: CheckContext) -> str:
    return await _fatal(ctx, Code.UNAUTHENTICATED, "missing or invalid bearer token", False)


@check(
    "sdk.9.stops-on-fatal-protocol-error",
    section="9",
    requires=NEEDS,
    description="Stops (never reconnects) when an established session fails invalid_argument.",
)
async def fatal_protocol(ctx: CheckContext) -> str:
    return await _fatal(ctx, Code.INVALID_ARGUMENT, "protocol violation: first frame must be Hello", True)


@check(
    "sdk.9.stops-on-fatal-protocol-error-before-welcome",
    section="4",
    requires=NEEDS,
    description="Stops (never reconnects) when the stream fails invalid_argument before any Welcome.",
)
async def fatal_protocol_before_welcome(ctx: CheckContext) -> str:
    return await _fatal(ctx, Code.INVALID_ARGUMENT, "protocol violation: malformed Hello", False)
