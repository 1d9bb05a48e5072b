"""SDK checks: every item of checklist §9, run against a worker program over a ScriptedPeer.

The default program is ``conveyor conformance worker`` (our SDK's Worker); the
peer plays a server that can do on demand what a real one cannot (Ping, exact
deadlines, transient and fatal stream errors).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import statistics
import time

from conveyor_conformance.checks._common import RELEASED, RETRY, SKIP_RETRY, SUCCESS, dur, ts
from conveyor_conformance.checks._peer import Conversation, Seen, open_conversation
from conveyor_conformance.context import CheckContext
from conveyor_conformance.model import CheckFailed, Requirement
from conveyor_conformance.registry import check
from conveyor_sdk.errors import Code

NEEDS = [Requirement.WORKER_CMD]


async def _ready(ctx: CheckContext, *, sleep_ms: int = 0, concurrency: int = 2) -> Conversation:
    """A worker program that said Hello and got a Welcome (heartbeat_interval 0.3 s)."""
    conv = await open_conversation(ctx, sleep_ms=sleep_ms, concurrency=concurrency)
    await conv.accept()
    await conv.welcome(heartbeat=0.3)
    return conv


def _has_result(task_id: str, n: int = 1):
    return lambda seen: len(seen.results().get(task_id, [])) >= n


@check(
    "sdk.9.opens-h2-session-with-bearer",
    section="9",
    requires=NEEDS,
    description=(
        "Opens the session over HTTP/2 at /conveyor.v1.WorkerService/Session with Authorization: Bearer."
    ),
)
async def opens_session(ctx: CheckContext) -> str:
    conv = await open_conversation(ctx, extra={"CONVEYOR_TOKEN": "cf-secret"}, require_token="cf-secret")
    await conv.accept()
    headers = conv.sess.headers
    ctx.expect(headers.get(":path") == "/conveyor.v1.WorkerService/Session", f"path {headers.get(':path')}")
    ctx.expect(
        headers.get("authorization") == "Bearer cf-secret", f"authorization {headers.get('authorization')!r}"
    )
    return f"h2 stream, content-type {headers.get('content-type')}, Bearer token sent"


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
    ctx.expect(hello.concurrency == 3, f"concurrency {hello.concurrency}, want 3")
    ctx.expect(hello.sdk_version, "sdk_version is empty")
    return f"queues={dict(hello.queues)} concurrency=3 sdk_version={hello.sdk_version!r}"


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
    await conv.until(_has_result("t-1"), "Result after Welcome")
    return "silent for 1.5 s before Welcome; Result after it"


@check(
    "sdk.9.heartbeat-interval-from-welcome",
    section="9",
    requires=NEEDS,
    description="Drives heartbeats from Welcome.heartbeat_interval (0.3 s here, not a hard-coded value).",
)
async def heartbeat_interval(ctx: CheckContext) -> str:
    conv = await _ready(ctx, sleep_ms=2500)
    await conv.dispatch("t-hb")
    await conv.until(_has_result("t-hb"), "Result", within=15)
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
    conv = await _ready(ctx, sleep_ms=2500, concurrency=3)
    await conv.dispatch("t-a")
    await conv.dispatch("t-b")
    await conv.batch(["m-1", "m-2"])
    want = {"t-a", "t-b", "m-1", "m-2"}
    await conv.until(lambda s: all(r in s.results() for r in want), "Results for all", within=20)
    first_result = min(t for t, m in conv.seen.frames if m.WhichOneof("frame") in ("result", "batch_result"))
    beats = [set(m.heartbeat.active_task_ids) for t, m in conv.seen.of("heartbeat") if t < first_result]
    ctx.expect(len(beats) >= 3, f"only {len(beats)} heartbeats before the first Result")
    missing = [sorted(want - b) for b in beats[1:] if not want <= b]
    ctx.expect(not missing, f"heartbeats omitted in-flight ids: {missing[:3]}")
    return f"{len(beats)} heartbeats each listed all 4 ids"


@check(
    "sdk.9.concurrent-up-to-concurrency-without-credit",
    section="9",
    requires=NEEDS,
    description="Executes up to concurrency dispatches at once and needs no Credit frames.",
)
async def concurrent(ctx: CheckContext) -> str:
    conv = await _ready(ctx, sleep_ms=2000, concurrency=3)
    loop = asyncio.get_running_loop()
    start = loop.time()
    for i in range(3):
        await conv.dispatch(f"t-{i}")
    await conv.until(lambda s: all(f"t-{i}" in s.results() for i in range(3)), "3 Results", within=15)
    elapsed = loop.time() - start
    ctx.expect(
        elapsed < 2000 / 1000 * 2 - 0.3, f"3 x 2 s tasks took {elapsed:.1f}s with concurrency 3 (serial?)"
    )
    ctx.expect(not conv.seen.of("credit"), f"sent {len(conv.seen.of('credit'))} Credit frames")
    return f"3 concurrent 2 s tasks done in {elapsed:.1f}s, no Credit"


@check(
    "sdk.9.one-result-per-dispatch",
    section="9",
    requires=NEEDS,
    description="Sends exactly one Result per Dispatch (and one BatchResult per BatchDispatch).",
)
async def one_result(ctx: CheckContext) -> str:
    conv = await _ready(ctx, concurrency=4)
    ids = ["t-ok", "t-fail", "t-skip"]
    for i, kind in zip(ids, ("conformance:task", "conformance:fail", "conformance:skip"), strict=True):
        await conv.dispatch(i, kind)
    await conv.batch(["m-1", "m-2", "m-3"])
    await conv.until(lambda s: all(i in s.results() for i in [*ids, "m-1", "m-2", "m-3"]), "all Results")
    await asyncio.sleep(ctx.t(1.0))  # room for duplicates to show up
    counts = {k: len(v) for k, v in conv.seen.results().items()}
    ctx.expect(all(n == 1 for n in counts.values()), f"Result counts {counts}")
    ctx.expect(
        len(conv.seen.of("batch_result")) == 1, f"{len(conv.seen.of('batch_result'))} BatchResult frames"
    )
    singles = {m.result.task_id for _, m in conv.seen.of("result")}
    ctx.expect(not singles & {"m-1", "m-2", "m-3"}, "batch members answered with single Result frames")
    return "one Result per task; the batch answered by one BatchResult"


@check(
    "sdk.9.outcome-mapping",
    section="9",
    requires=NEEDS,
    description="Maps success -> SUCCESS, skip-retry sentinel -> SKIP_RETRY (with error_msg).",
)
async def outcome_mapping(ctx: CheckContext) -> str:
    conv = await _ready(ctx)
    await conv.dispatch("t-ok")
    await conv.dispatch("t-skip", "conformance:skip")
    await conv.until(lambda s: "t-ok" in s.results() and "t-skip" in s.results(), "Results")
    ok, skip = conv.seen.results()["t-ok"][0], conv.seen.results()["t-skip"][0]
    ctx.expect(ok.outcome == SUCCESS, f"success mapped to {ok.outcome}")
    ctx.expect(
        skip.outcome == SKIP_RETRY and skip.error_msg, f"skip mapped to {skip.outcome} {skip.error_msg!r}"
    )
    return f"SUCCESS; SKIP_RETRY ({skip.error_msg!r})"


@check(
    "sdk.9.exception-maps-to-retry",
    section="9",
    requires=NEEDS,
    description=(
        "An uncaught exception (panic) in a handler is recovered and reported as RETRY with error_msg."
    ),
)
async def exception_retry(ctx: CheckContext) -> str:
    conv = await _ready(ctx)
    await conv.dispatch("t-fail", "conformance:fail")
    await conv.dispatch("t-after")
    await conv.until(lambda s: "t-fail" in s.results() and "t-after" in s.results(), "Results")
    res = conv.seen.results()["t-fail"][0]
    ctx.expect(res.outcome == RETRY, f"exception mapped to outcome {res.outcome}, want RETRY")
    ctx.expect(res.error_msg, "RETRY without error_msg")
    return f"RETRY ({res.error_msg!r}); the worker kept serving"


@check(
    "sdk.9.honours-dispatch-deadline",
    section="9",
    requires=NEEDS,
    description=(
        "Cancels a handler running past its Dispatch.deadline (set from TaskOptions.deadline or "
        "timeout, as a server does) and reports RETRY."
    ),
)
async def honours_deadline(ctx: CheckContext) -> str:
    from conveyor_sdk._gen.conveyor.v1 import task_pb2 as tpb

    conv = await _ready(ctx, sleep_ms=20_000, concurrency=2)
    loop = asyncio.get_running_loop()
    start = loop.time()
    by_deadline = tpb.TaskOptions(deadline=ts(time.time() + 0.8))
    by_timeout = tpb.TaskOptions(timeout=dur(0.8))
    await conv.dispatch("t-deadline", deadline_in=0.8, options=by_deadline)
    await conv.dispatch("t-timeout", deadline_in=0.8, options=by_timeout)
    for task_id in ("t-deadline", "t-timeout"):
        await conv.until(_has_result(task_id), f"Result for {task_id} after its deadline", within=8)
        res = conv.seen.results()[task_id][0]
        ctx.expect(res.outcome == RETRY, f"{task_id}: outcome {res.outcome}, want RETRY")
    return f"both RETRY {loop.time() - start:.1f}s after 0.8 s deadlines (TaskOptions.deadline and timeout)"


@check(
    "sdk.9.honours-cancel",
    section="9",
    requires=NEEDS,
    description="A server Cancel stops the running handler; the worker still reports one Result (RETRY).",
)
async def honours_cancel(ctx: CheckContext) -> str:
    from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb

    conv = await _ready(ctx, sleep_ms=20_000)
    await conv.dispatch("t-cancel")
    await conv.until(
        lambda s: any("t-cancel" in m.heartbeat.active_task_ids for _, m in s.of("heartbeat")),
        "heartbeat for the running task",
    )
    await conv.send(pb.ServerMessage(cancel=pb.Cancel(task_id="t-cancel")))
    await conv.until(_has_result("t-cancel"), "Result after Cancel", within=8)
    res = conv.seen.results()["t-cancel"][0]
    ctx.expect(res.outcome == RETRY, f"cancel outcome {res.outcome}, want RETRY")
    return "handler stopped; RETRY reported"


@check(
    "sdk.9.tolerates-ping",
    section="9",
    requires=NEEDS,
    description="Tolerates Ping without replying and keeps the session working.",
)
async def tolerates_ping(ctx: CheckContext) -> str:
    from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb

    conv = await _ready(ctx)
    for _ in range(3):
        await conv.send(pb.ServerMessage(ping=pb.Ping()))
    await conv.dispatch("t-after-ping")
    await conv.until(_has_result("t-after-ping"), "Result after Ping")
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


@check(
    "sdk.9.reconnects-with-full-jitter",
    section="9",
    requires=NEEDS,
    timeout=90,
    description="Reconnects after transient errors with delays uniform in [0, min(30s, 0.5s * 2^n)).",
)
async def reconnect_jitter(ctx: CheckContext) -> str:
    conv = await open_conversation(ctx)
    gaps = await _reconnect_gaps(conv, 4, Code.UNAVAILABLE)
    ceilings = [0.5 * 2**n for n in range(4)]  # delay before reconnect attempt n (0-based)
    over = [(round(g, 2), c) for g, c in zip(gaps, ceilings, strict=False) if g > c + 1.0]
    ctx.expect(not over, f"reconnect gaps above the full-jitter ceiling: {over}")
    ctx.expect(any(g < 0.8 * c for g, c in zip(gaps, ceilings, strict=False)), f"no jitter: gaps {gaps}")
    return "gaps " + ", ".join(f"{g:.2f}s" for g in gaps)


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
    else:
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
    description="Stops (never reconnects) after an invalid_argument protocol violation.",
)
async def fatal_protocol(ctx: CheckContext) -> str:
    return await _fatal(ctx, Code.INVALID_ARGUMENT, "protocol violation: first frame must be Hello", True)


@check(
    "sdk.9.closes-stream-on-shutdown",
    section="9",
    requires=NEEDS,
    description=(
        "On SIGTERM, finishes or RELEASES in-flight work (never RETRY), half-closes the stream, exits 0."
    ),
)
async def closes_on_shutdown(ctx: CheckContext) -> str:
    conv = await _ready(ctx, sleep_ms=30_000)
    await conv.dispatch("t-long")
    await conv.until(
        lambda s: any("t-long" in m.heartbeat.active_task_ids for _, m in s.of("heartbeat")),
        "heartbeat for the running task",
    )
    conv.proc.terminate()
    await conv.until(lambda s: s.closed, "stream end after SIGTERM", within=30)
    ctx.expect(conv.sess.client_half_closed, "the stream was dropped, not half-closed (END_STREAM)")
    res = conv.seen.results().get("t-long", [])
    ctx.expect(
        all(r.outcome in (SUCCESS, RELEASED) for r in res), f"drain reported {[r.outcome for r in res]}"
    )
    code = await conv.proc.wait(ctx.t(15))
    ctx.expect(code == 0, f"exit code {code} after SIGTERM")
    return f"stream half-closed; in-flight task {'RELEASED' if res else 'left to the server'}; exit 0"


@check(
    "sdk.5.10.heartbeats-continue-during-drain",
    section="5.10",
    requires=NEEDS,
    description="While draining, the worker keeps heartbeating tasks still in flight until their Result.",
)
async def heartbeats_during_drain(ctx: CheckContext) -> str:
    conv = await _ready(ctx, sleep_ms=3500)
    await conv.dispatch("t-drain")
    await conv.until(lambda s: s.of("heartbeat"), "first heartbeat")
    loop = asyncio.get_running_loop()
    sigterm = loop.time()
    conv.proc.terminate()
    await conv.until(lambda s: s.closed or "t-drain" in s.results(), "Result or close", within=30)
    done = min([t for t, m in conv.seen.of("result")] or [loop.time()])
    beats = [
        t
        for t, m in conv.seen.of("heartbeat")
        if sigterm < t <= done and "t-drain" in m.heartbeat.active_task_ids
    ]
    points = [sigterm, *beats, done]
    gap = max(b - a for a, b in itertools.pairwise(points))
    ctx.expect(
        gap <= 1.5, f"{gap:.1f}s without a heartbeat for an in-flight task during drain (interval 0.3 s)"
    )
    return f"{len(beats)} heartbeats during {done - sigterm:.1f}s of drain, longest gap {gap:.2f}s"


@check(
    "sdk.5.10.late-dispatch-heartbeated-not-started",
    section="5.10",
    requires=NEEDS,
    description="A Dispatch arriving during drain is listed in Heartbeats and never started.",
)
async def late_dispatch(ctx: CheckContext) -> str:
    conv = await _ready(ctx, sleep_ms=2500)
    await conv.dispatch("t-running")
    await conv.until(lambda s: s.of("heartbeat"), "first heartbeat")
    conv.proc.terminate()
    await asyncio.sleep(ctx.t(0.5))  # let the signal land: the worker is draining now
    await conv.dispatch("t-late", "conformance:json", payload=b'{"late":1}')  # instant if started

    def listed(seen: Seen) -> bool:
        return any("t-late" in m.heartbeat.active_task_ids for _, m in seen.of("heartbeat"))

    await conv.until(lambda s: listed(s) or "t-late" in s.results(), "heartbeat or Result for it", within=5)
    await conv.until(lambda s: s.closed, "stream end after the drain", within=30)
    late = conv.seen.results().get("t-late", [])
    ctx.expect(
        all(r.outcome == RELEASED for r in late), f"late dispatch was run: {[r.outcome for r in late]}"
    )
    ctx.expect(listed(conv.seen), "the late dispatch was never listed in a Heartbeat")
    return "late dispatch heartbeated, " + ("released" if late else "left for the server to release")


_GO_JSON = b'{"n":42,"nested":{"k":[1,2,3]},"s":"h\\u00e9llo \\u003ctag\\u003e","t":true}'


@check(
    "sdk.9.json-payload-byte-compatible",
    section="9",
    requires=NEEDS,
    description="Consumes application/json bytes written by another SDK (Go encoding/json style) correctly.",
)
async def json_compatible(ctx: CheckContext) -> str:
    conv = await _ready(ctx)
    await conv.dispatch("t-json", "conformance:json", payload=_GO_JSON)
    await conv.until(_has_result("t-json"), "Result")
    res = conv.seen.results()["t-json"][0]
    ctx.expect(res.outcome == SUCCESS, f"outcome {res.outcome}: {res.error_msg}")
    ctx.expect(json.loads(res.result) == json.loads(_GO_JSON), f"decoded value differs: {res.result!r}")
    return "decoded and re-encoded to an equal JSON value"


@check(
    "sdk.3.unknown-content-type-is-an-error",
    section="3",
    requires=NEEDS,
    description="A payload with a content_type the SDK has no codec for fails the task instead of guessing.",
)
async def unknown_content_type(ctx: CheckContext) -> str:
    conv = await _ready(ctx)
    await conv.dispatch(
        "t-ct", "conformance:json", payload=b'{"n":1}', content_type="application/x-unknown-codec"
    )
    await conv.until(_has_result("t-ct"), "Result")
    res = conv.seen.results()["t-ct"][0]
    ctx.expect(res.outcome in (RETRY, SKIP_RETRY), f"outcome {res.outcome} for an unknown content_type")
    return f"outcome {res.outcome} ({res.error_msg!r})"


_VALUE = {"s": "h\u00e9llo <tag>", "n": 42, "nested": {"k": [1, 2, 3]}, "t": True}
_GO_BYTES = '{"n":42,"nested":{"k":[1,2,3]},"s":"h\u00e9llo \\u003ctag\\u003e","t":true}'.encode()


@check(
    "sdk.9.json-payload-producer-bytes",
    section="9",
    description="Our client encodes application/json payloads as the bytes Go's encoding/json produces.",
)
async def json_producer(ctx: CheckContext) -> str:
    from conveyor_sdk.client import Client

    client = Client(ctx.env.url, token=ctx.env.token)
    ctx.on_close(client.aclose)
    info = await client.enqueue("conformance:json", _VALUE, queue=ctx.queue, retention=3600)
    stored = await ctx.api.get_task(info.id)
    ctx.expect(stored.content_type == "application/json", f"content_type {stored.content_type!r}")
    ctx.expect(
        json.loads(stored.payload) == _VALUE, f"payload does not decode to the value: {stored.payload!r}"
    )
    ctx.expect(stored.payload == _GO_BYTES, f"bytes {stored.payload!r} differ from Go's {_GO_BYTES!r}")
    return f"{len(stored.payload)} bytes, identical to Go encoding/json"
