"""conveyord's Prometheus listener serves what the reference server's does: names, types, labels, counts.

tests/server_http/test_metrics.py pins the reference server to ``UPSTREAM_SERIES``; this runs the same
work against a real conveyord and checks its metrics listener against the same list, so an operator's
dashboards, alerts and KEDA triggers work unchanged on either server.
"""

from __future__ import annotations

import asyncio
import re

import httpx

from conveyor_sdk.client import Client
from conveyor_sdk.types import RetryPolicy, TaskState
from conveyor_sdk.worker import Registry, SkipRetry, TaskContext, TaskData, Worker
from tests.interop._conveyord import Conveyord
from tests.sdk_worker._helpers import KEEP, running, wait_state
from tests.server_http.test_metrics import UPSTREAM_BUCKETS, UPSTREAM_SERIES, parse

NOT_EXPORTED = (
    r"conveyor_(lease_expired|wakeups_swept|breaker_open|ratelimit_throttled|concurrency_throttled"
    r"|events_dropped|webhook_deliveries|webhook_withheld)_total$"
)


def _series(text: str) -> set[tuple[str, str, tuple[str, ...]]]:
    """(name, type, label names) of every conveyor_* series, upstream's otel_scope_* labels left out."""
    types, samples = parse(_conveyor_only(text))
    out = set()
    for name, labels in samples:
        base = name if name in types else re.sub(r"_(bucket|sum|count)$", "", name)
        names = tuple(k for k, _ in labels if k != "le" and not k.startswith("otel_scope_"))
        out.add((base, types[base], names))
    return out


def _conveyor_only(text: str) -> str:
    """The conveyor_* lines of an exposition (conveyord also serves Go runtime and target_info series)."""
    keep = []
    for line in text.splitlines():
        name = line.split(" ")[2] if line.startswith("# ") and len(line.split(" ")) > 2 else line
        if name.startswith("conveyor_"):
            keep.append(line)
    return "\n".join(keep) + "\n"


def _registry() -> Registry:
    reg = Registry()
    reg.handler("ok")(lambda t, c: b"")

    @reg.handler("skip")
    def skip(task: TaskData, ctx: TaskContext) -> None:
        raise SkipRetry("bad input")

    @reg.handler("boom")
    def boom(task: TaskData, ctx: TaskContext) -> None:
        raise ValueError("nope")

    return reg


def _value(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    """The sample ``name{labels}``, upstream's otel_scope_* labels ignored (0 when absent)."""
    want = tuple(sorted(labels.items()))
    for (n, have), v in samples.items():
        if n == name and tuple(kv for kv in have if not kv[0].startswith("otel_scope_")) == want:
            return v
    return 0.0


def test_conveyord_metrics_have_the_reference_servers_names_and_counts(conveyord: Conveyord) -> None:
    """The same tasks as the reference server's test: the same series and the same outcome counts."""
    url, metrics = conveyord.url, conveyord.metrics_url + "/metrics"

    async def main() -> tuple[str, float]:
        async with httpx.AsyncClient() as http, Client(url) as client:
            await client.enqueue("ok", b"", queue="mwaiting", **KEEP)
            await client.enqueue("ok", b"", queue="mwaiting", **KEEP)
            before = parse((await http.get(metrics)).text)[1]
            fast = RetryPolicy(base=0.05, max=0.1)
            async with running(Worker(url, queues={"mwork": 1}), _registry()):
                ok = await client.enqueue("ok", b"", queue="mwork", **KEEP)
                sk = await client.enqueue("skip", b"", queue="mwork", **KEEP)
                bm = await client.enqueue("boom", b"", queue="mwork", max_retry=1, retry_policy=fast, **KEEP)
                await wait_state(client, ok.id, TaskState.COMPLETED)
                await wait_state(client, sk.id, TaskState.ARCHIVED)
                await wait_state(client, bm.id, TaskState.ARCHIVED, timeout=30)
            resp = await http.get(metrics)
        return resp.text, _value(before, "conveyor_pending", queue="mwaiting")

    text, pending_before = asyncio.run(main())
    assert pending_before == 2
    series = _series(text)
    assert series >= UPSTREAM_SERIES, sorted(UPSTREAM_SERIES - series)
    # Beyond them only what docs/server-http.md says the reference server leaves out (the canaries).
    extra = {name for name, _, _ in series - UPSTREAM_SERIES}
    assert all(re.match(NOT_EXPORTED, name) for name in extra), sorted(extra)
    samples = parse(_conveyor_only(text))[1]
    # The module's conveyord is shared with other tests: counters are compared as at least ours.
    assert _value(samples, "conveyor_enqueued_total") >= 5
    assert _value(samples, "conveyor_completed_total") >= 1
    assert _value(samples, "conveyor_failed_total") >= 3  # skip once, boom twice
    assert _value(samples, "conveyor_retried_total") >= 1
    assert _value(samples, "conveyor_archived_total") >= 2
    assert _value(samples, "conveyor_pending", queue="mwaiting") == 2
    assert _value(samples, "conveyor_queue_latency_seconds_count", queue="mwork") == 4
    assert _value(samples, "conveyor_process_duration_seconds_count", queue="mwork") == 4
    les = [le for (name, labels), _ in samples.items() if name == "conveyor_queue_latency_seconds_bucket"
           for k, le in labels if k == "le"]  # fmt: skip
    assert les[: len(UPSTREAM_BUCKETS)] == UPSTREAM_BUCKETS
