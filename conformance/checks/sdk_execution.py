"""SDK checks (§9), execution side: concurrency, Results and outcome mapping, deadlines, Cancel,
drain and shutdown, JSON payload compatibility.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import secrets
import time

from conveyor_conformance.checks._common import RELEASED, RETRY, SKIP_RETRY, SUCCESS, dur, ts
from conveyor_conformance.checks._peer import (
    Seen,
    has_result,
    ready_conversation,
    slots,
)
from conveyor_conformance.context import CheckContext
from conveyor_conformance.model import CheckFailed, NotApplicable, Requirement
from conveyor_conformance.registry import check

NEEDS = [Requirement.WORKER_CMD]
CANCELLABLE = "conformance:cancellable"  # stops when cancelled; conformance:task ignores cancellation


@check(
    "sdk.9.concurrent-up-to-concurrency-without-credit",
    section="9",
    requires=NEEDS,
    description="Executes up to concurrency dispatches at once and needs no Credit frames.",
)
async def concurrent(ctx: CheckContext) -> str:
    conv = await ready_conversation(ctx, sleep_ms=2000, concurrency=3)
    n = slots(conv, 3)  # Hello.concurrency decides (CONCURRENCY=3 when the program declares it)
    loop = asyncio.get_running_loop()
    start = loop.time()
    for i in range(n):
        await conv.dispatch(f"t-{i}")
    await conv.until(lambda s: all(f"t-{i}" in s.results() for i in range(n)), f"{n} Results", within=15)
    elapsed = loop.time() - start
    if n > 1:
        serial = f"{n} x 2 s tasks took {elapsed:.1f}s with concurrency {n} (serial?)"
        ctx.expect(elapsed < 2 * 2 - 0.3, serial)
    ctx.expect(not conv.seen.of("credit"), f"sent {len(conv.seen.of('credit'))} Credit frames")
    return f"{n} concurrent 2 s tasks done in {elapsed:.1f}s, no Credit"


@check(
    "sdk.9.one-result-per-dispatch",
    section="9",
    requires=NEEDS,
    description="Sends exactly one Result per Dispatch (and one BatchResult per BatchDispatch).",
)
async def one_result(ctx: CheckContext) -> str:
    conv = await ready_conversation(ctx, concurrency=4)
    kinds = {"t-ok": "conformance:task", "t-fail": "conformance:fail", "t-skip": "conformance:skip"}
    kinds = {i: k for i, k in kinds.items() if k == "conformance:task" or ctx.declares(k)}
    ids = list(kinds)[: slots(conv, 4) - 1]  # the batch takes one slot
    for i in ids:
        await conv.dispatch(i, kinds[i])
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
    return f"one Result per task ({', '.join(ids)}); the batch answered by one BatchResult"


@check(
    "sdk.9.outcome-mapping",
    section="9",
    requires=NEEDS,
    declares=["conformance:skip"],
    description="Maps success -> SUCCESS, skip-retry sentinel -> SKIP_RETRY (with error_msg).",
)
async def outcome_mapping(ctx: CheckContext) -> str:
    conv = await ready_conversation(ctx)
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
    declares=["conformance:fail"],
    description=(
        "An uncaught exception (panic) in a handler is recovered and reported as RETRY, its error_msg "
        "carrying the marker the check planted in the exception."
    ),
)
async def exception_retry(ctx: CheckContext) -> str:
    conv = await ready_conversation(ctx)
    marker = f"cf-marker-{secrets.token_hex(4)}"
    await conv.dispatch("t-fail", "conformance:fail", payload=json.dumps({"marker": marker}).encode())
    await conv.dispatch("t-after")
    await conv.until(lambda s: "t-fail" in s.results() and "t-after" in s.results(), "Results")
    res = conv.seen.results()["t-fail"][0]
    ctx.expect(res.outcome == RETRY, f"exception mapped to outcome {res.outcome}, want RETRY")
    ctx.expect(
        marker in res.error_msg,
        f"error_msg {res.error_msg!r} lacks the planted marker {marker!r}: the RETRY did not come from "
        "the handler's exception (no handler registered?)",
    )
    return f"RETRY ({res.error_msg!r}); the worker kept serving"


@check(
    "sdk.9.honours-dispatch-deadline",
    section="9",
    requires=NEEDS,
    declares=["conformance:cancellable"],
    description=(
        "Cancels a handler running past its Dispatch.deadline (set from TaskOptions.deadline or "
        "timeout, as a server does) and reports RETRY."
    ),
)
async def honours_deadline(ctx: CheckContext) -> str:
    from conveyor_sdk._gen.conveyor.v1 import task_pb2 as tpb

    conv = await ready_conversation(ctx, sleep_ms=20_000, concurrency=2)
    loop = asyncio.get_running_loop()
    start = loop.time()
    by_deadline = tpb.TaskOptions(deadline=ts(time.time() + 0.8))
    by_timeout = tpb.TaskOptions(timeout=dur(0.8))
    await conv.dispatch("t-deadline", CANCELLABLE, deadline_in=0.8, options=by_deadline)
    await conv.dispatch("t-timeout", CANCELLABLE, deadline_in=0.8, options=by_timeout)
    for task_id in ("t-deadline", "t-timeout"):
        await conv.until(has_result(task_id), f"Result for {task_id} after its deadline", within=8)
        res = conv.seen.results()[task_id][0]
        ctx.expect(res.outcome == RETRY, f"{task_id}: outcome {res.outcome}, want RETRY")
    return f"both RETRY {loop.time() - start:.1f}s after 0.8 s deadlines (TaskOptions.deadline and timeout)"


@check(
    "sdk.9.honours-cancel",
    section="9",
    requires=NEEDS,
    declares=["conformance:cancellable"],
    description="A server Cancel stops the running handler; the worker still reports one Result (RETRY).",
)
async def honours_cancel(ctx: CheckContext) -> str:
    from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb

    conv = await ready_conversation(ctx, sleep_ms=20_000)
    await conv.dispatch("t-cancel", CANCELLABLE)
    await conv.until(
        lambda s: any("t-cancel" in m.heartbeat.active_task_ids for _, m in s.of("heartbeat")),
        "heartbeat for the running task",
    )
    await conv.send(pb.ServerMessage(cancel=pb.Cancel(task_id="t-cancel")))
    await conv.until(has_result("t-cancel"), "Result after Cancel", within=8)
    res = conv.seen.results()["t-cancel"][0]
    ctx.expect(res.outcome == RETRY, f"cancel outcome {res.outcome}, want RETRY")
    return "handler stopped; RETRY reported"


@check(
    "sdk.9.closes-stream-on-shutdown",
    section="9",
    requires=NEEDS,
    description=(
        "On SIGTERM, finishes or RELEASES in-flight work (never RETRY), half-closes the stream, exits 0."
    ),
)
async def closes_on_shutdown(ctx: CheckContext) -> str:
    grace = {"DRAIN_GRACE_S": "1"} if ctx.declares("DRAIN_GRACE_S") else {}  # exercise the release path
    conv = await ready_conversation(ctx, sleep_ms=4000, extra=grace)
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
    code = await conv.proc.wait(ctx.t(30))
    ctx.expect(code is not None, "the program did not exit within 30 s of its stream's end")
    ctx.expect(code == 0, f"exit code {code} after SIGTERM; {conv.proc.tail(3)}")
    fate = "left to the server" if not res else "finished" if res[0].outcome == SUCCESS else "RELEASED"
    return f"stream half-closed; in-flight task {fate}; exit 0"


@check(
    "sdk.5.10.heartbeats-continue-during-drain",
    section="5.10",
    requires=NEEDS,
    description="While draining, the worker keeps heartbeating tasks still in flight until their Result.",
)
async def heartbeats_during_drain(ctx: CheckContext) -> str:
    conv = await ready_conversation(ctx, sleep_ms=3500)
    await conv.dispatch("t-drain")
    await conv.until(lambda s: s.of("heartbeat"), "first heartbeat")
    loop = asyncio.get_running_loop()
    sigterm = loop.time()
    conv.proc.terminate()
    await conv.until(lambda s: s.closed or "t-drain" in s.results(), "Result or close", within=30)
    results = [t for t, m in conv.seen.of("result") if m.result.task_id == "t-drain"]
    if not results and conv.half_closed_at is not None and conv.half_closed_at - sigterm < 1.0:
        raise NotApplicable(
            f"n/a: the worker half-closed {conv.half_closed_at - sigterm:.1f}s after SIGTERM, leaving the "
            "in-flight task to the server's release on close (§5.10); no drain window to heartbeat in"
        )
    done = min([*results, conv.half_closed_at or loop.time()])
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
    """The peer keeps its send side open after a half-close, as §5.10 lets a server dispatch until then."""
    conv = await ready_conversation(ctx, sleep_ms=2500)
    conv.end_on_half_close = False
    await conv.dispatch("t-running")
    await conv.until(lambda s: s.of("heartbeat"), "first heartbeat")
    conv.proc.terminate()
    await asyncio.sleep(ctx.t(0.5))  # let the signal land: the worker is draining now
    closed_first = conv.seen.closed
    instant = ctx.declares("conformance:json")  # if started, it answers SUCCESS at once
    try:
        await conv.dispatch("t-late", "conformance:json" if instant else "conformance:task")
    except Exception as exc:  # h2 StreamClosedError, a reset, a dropped socket: the peer could not send
        if not closed_first:
            raise CheckFailed(f"the stream broke at SIGTERM without a half-close: {exc}") from None
    if closed_first:
        await conv.end_quietly()
        raise NotApplicable(
            "n/a: the worker half-closed its request side at SIGTERM (§5.10 allows it), so no Dispatch "
            "could reach it while it kept the stream open; the late-dispatch rule does not apply"
        )

    def listed(seen: Seen) -> bool:
        return any("t-late" in m.heartbeat.active_task_ids for _, m in seen.of("heartbeat"))

    await conv.until(lambda s: listed(s) or "t-late" in s.results() or s.closed, "Heartbeat, Result or close")
    await conv.until(lambda s: s.closed, "the half-close ending the drain", within=30)
    await conv.end_quietly()
    late = conv.seen.results().get("t-late", [])
    ctx.expect(
        all(r.outcome == RELEASED for r in late), f"late dispatch was run: {[r.outcome for r in late]}"
    )
    ctx.expect(listed(conv.seen), "the late dispatch was never listed in a Heartbeat (dropped)")
    return "late dispatch heartbeated, " + ("released" if late else "left for the server to release")


_GO_JSON = b'{"n":42,"nested":{"k":[1,2,3]},"s":"h\\u00e9llo \\u003ctag\\u003e","t":true}'


@check(
    "sdk.9.json-payload-byte-compatible",
    section="9",
    requires=NEEDS,
    declares=["conformance:json"],
    description="Consumes application/json bytes written by another SDK (Go encoding/json style) correctly.",
)
async def json_compatible(ctx: CheckContext) -> str:
    conv = await ready_conversation(ctx)
    await conv.dispatch("t-json", "conformance:json", payload=_GO_JSON)
    await conv.until(has_result("t-json"), "Result")
    res = conv.seen.results()["t-json"][0]
    ctx.expect(res.outcome == SUCCESS, f"outcome {res.outcome}: {res.error_msg}")
    if not res.result:
        raise NotApplicable(
            "n/a: decoded without error, but the program returned no Result.result bytes (OPTIONAL, "
            "§5.8), so the decoded value cannot be compared"
        )
    try:
        echoed = json.loads(res.result)
    except ValueError:
        raise CheckFailed(f"Result.result is not JSON: {res.result[:80]!r}") from None
    ctx.expect(echoed == json.loads(_GO_JSON), f"decoded value differs: {res.result!r}")
    return "decoded and re-encoded to an equal JSON value"


_ODD_TYPE = "application/x-conformance-unknown"


@check(
    "sdk.3.unknown-content-type-is-an-error",
    section="3",
    requires=NEEDS,
    declares=["conformance:json"],
    description=(
        "A payload with a content_type the SDK has no codec for fails the task instead of guessing "
        "(the same type and bytes with application/json succeed)."
    ),
)
async def unknown_content_type(ctx: CheckContext) -> str:
    conv = await ready_conversation(ctx)
    await conv.dispatch("t-control", "conformance:json", payload=b'{"n":1}')
    await conv.dispatch("t-ct", "conformance:json", payload=b'{"n":1}', content_type=_ODD_TYPE)
    await conv.until(lambda s: "t-ct" in s.results() and "t-control" in s.results(), "Results")
    control, res = conv.seen.results()["t-control"][0], conv.seen.results()["t-ct"][0]
    ctx.expect(
        control.outcome == SUCCESS,
        f"the application/json control failed too ({control.outcome}: {control.error_msg!r}), so a "
        "failure could not be attributed to the content_type",
    )
    ctx.expect(res.outcome in (RETRY, SKIP_RETRY), f"outcome {res.outcome} for content_type {_ODD_TYPE}")
    named = "names it" if _ODD_TYPE in res.error_msg else "does not name it"
    return f"outcome {res.outcome}, error_msg {named} ({res.error_msg!r}); application/json control succeeded"


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
