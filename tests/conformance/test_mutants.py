"""The suite can fail: deliberately broken workers and a broken server fail exactly the checks they break."""

from __future__ import annotations

import asyncio
import os
import sys

import pytest

from conveyor_conformance import Status, SuiteConfig, default_registry, run_suite
from conveyor_conformance.harness import SHORT_TIMINGS, stop_server
from conveyor_server_min.testing import ServerProcess
from tests.conformance._helpers import RAW_WORKER, failing, run_variants

# mutation -> checks it must fail
WORKER_MUTANTS: dict[str, list[str]] = {
    "no-heartbeat": ["worker.5.6.long-task-keeps-lease", "sdk.9.heartbeat-interval-from-welcome"],
    "partial-heartbeat": ["sdk.9.heartbeats-every-inflight-id", "worker.5.11.batch-keeps-leases"],
    "no-heartbeat-during-drain": [
        "sdk.5.10.heartbeats-continue-during-drain",
        "worker.5.10.drain-releases-without-retry",
    ],
    "per-member-results": ["sdk.9.one-result-per-dispatch"],
    "retry-on-drain": ["worker.5.10.drain-releases-without-retry", "sdk.9.closes-stream-on-shutdown"],
    "no-close-on-shutdown": ["sdk.9.closes-stream-on-shutdown"],
    "ignore-deadline": ["sdk.9.honours-dispatch-deadline"],
    "ignore-cancel": ["sdk.9.honours-cancel"],
    "cancel-at-lease-deadline": ["worker.5.6.long-task-keeps-lease"],
    "exception-as-success": ["sdk.9.exception-maps-to-retry"],
    "serial": ["sdk.9.concurrent-up-to-concurrency-without-credit"],
    "sends-credit": ["sdk.9.concurrent-up-to-concurrency-without-credit"],
    "crash-on-ping": ["sdk.9.tolerates-ping"],
    "reconnect-no-jitter": ["sdk.9.reconnects-with-full-jitter"],
    "jitter-ceiling-doubled": ["sdk.9.reconnects-with-full-jitter"],
    "group-key-heartbeat": ["sdk.9.heartbeats-every-inflight-id", "worker.5.11.batch-keeps-leases"],
    "drop-late-dispatch": ["sdk.5.10.late-dispatch-heartbeated-not-started"],
    "no-handlers": ["sdk.9.exception-maps-to-retry", "sdk.3.unknown-content-type-is-an-error"],
    "no-reset-backoff": ["sdk.9.reconnect-counter-resets-after-welcome"],
    "reconnect-on-fatal": [
        "sdk.9.stops-on-fatal-unauthenticated",
        "sdk.9.stops-on-fatal-protocol-error",
        "sdk.9.stops-on-fatal-protocol-error-before-welcome",
    ],
    "accept-bad-hello": ["worker.5.2.bad-hello-rejected-locally"],
    "start-late-dispatch": ["sdk.5.10.late-dispatch-heartbeated-not-started"],
}


# The deviations found in the upstream SDK snapshots; each is also run speaking Connect streaming.
CONNECT_TWINS = [
    "no-heartbeat-during-drain",
    "drop-late-dispatch",
    "group-key-heartbeat",
    "per-member-results",
    "accept-bad-hello",
]


@pytest.mark.timeout(400)
def test_each_worker_mutant_fails_the_checks_it_breaks() -> None:
    """Every raw-worker mutation makes its target checks FAIL (not error, not pass)."""
    variants = {m: (ids, RAW_WORKER, {"MUTATION": m}) for m, ids in WORKER_MUTANTS.items()}
    out = asyncio.run(run_variants(variants, concurrency=8))
    wrong = {
        m: {r.id: f"{r.status.value}: {r.detail}" for r in results if r.status is not Status.FAIL}
        for m, results in out.items()
    }
    assert {m: w for m, w in wrong.items() if w} == {}


@pytest.mark.timeout(400)
def test_connect_streaming_mutants_are_caught_like_their_grpc_twins() -> None:
    """The upstream-style deviations fail the same checks when the mutant speaks Connect streaming."""
    env = {"CONVEYOR_PROTOCOL": "connect"}
    variants = {m: (WORKER_MUTANTS[m], RAW_WORKER, {"MUTATION": m, **env}) for m in CONNECT_TWINS}
    out = asyncio.run(run_variants(variants, concurrency=8))
    wrong = {
        m: {r.id: f"{r.status.value}: {r.detail}" for r in results if r.status is not Status.FAIL}
        for m, results in out.items()
    }
    assert {m: w for m, w in wrong.items() if w} == {}


def test_long_task_failure_says_what_happened() -> None:
    """A lapsed lease and a handler cancelled at its own (lease) deadline get different explanations."""
    ids = ["worker.5.6.long-task-keeps-lease"]
    variants = {m: (ids, RAW_WORKER, {"MUTATION": m}) for m in ("no-heartbeat", "cancel-at-lease-deadline")}
    out = asyncio.run(run_variants(variants))
    lapsed, cancelled = out["no-heartbeat"][0], out["cancel-at-lease-deadline"][0]
    assert lapsed.status is Status.FAIL and "lost its lease" in lapsed.detail, lapsed.detail
    assert cancelled.status is Status.FAIL, cancelled.detail
    assert "cancelled the handler at its Dispatch.deadline" in cancelled.detail, cancelled.detail


def test_every_mutant_target_exists() -> None:
    """The mutant table names real checks only."""
    reg = default_registry()
    for ids in WORKER_MUTANTS.values():
        for check_id in ids:
            assert check_id in reg


class _MutantServer(ServerProcess):
    def command(self) -> list[str]:
        cmd = super().command()
        return [sys.executable, "-m", "conveyor_conformance.mutants.server_mutant", *cmd[3:]]


SERVER_MUTANTS: dict[str, list[str]] = {
    "no-credits": ["server.5.5.credits-never-exceeded", "server.5.5.result-refills-one-credit"],
    "ignore-heartbeats": [
        "server.5.6.heartbeats-extend-leases",
        "server.5.6.omitted-from-heartbeat-is-reclaimed",
    ],
    "ignore-progress": ["server.5.8.progress-visible"],
    "keep-silent": ["server.5.10.silent-session-closed-without-charge"],
    "lapse-back": ["server.5.6.reclaimed-task-goes-elsewhere"],
}
CONTROL = "server.6.2.get-task-errors"  # unaffected by every server mutation


async def _against(mutation: str, ids: list[str]) -> dict[str, Status]:
    proc = _MutantServer(SHORT_TIMINGS, env={**os.environ, "MUTATION": mutation})
    await asyncio.to_thread(proc.start)
    try:
        summary = await run_suite(SuiteConfig(server=proc.url, only=(*ids, CONTROL)))
    finally:
        assert await asyncio.to_thread(stop_server, proc) == 0
    return {r.id: r.status for r in summary.results}


def test_each_server_mutant_fails_the_checks_it_breaks() -> None:
    """A server that ignores credits, heartbeats, progress or silence fails exactly the matching checks.

    An optional check (behaviour the protocol document does not require) reports ``optional-fail``.
    """

    async def main() -> dict[str, dict[str, Status]]:
        gate = asyncio.Semaphore(3)  # five servers starting at once on 2 busy cores missed the start timeout

        async def one(mutation: str, ids: list[str]) -> dict[str, Status]:
            async with gate:
                return await _against(mutation, ids)

        runs = [one(m, ids) for m, ids in SERVER_MUTANTS.items()]
        return dict(zip(SERVER_MUTANTS, await asyncio.gather(*runs), strict=True))

    out = asyncio.run(main())
    reg = default_registry()
    for mutation, ids in SERVER_MUTANTS.items():
        want = {i: Status.OPTIONAL_FAIL if reg.get(i).optional else Status.FAIL for i in ids}
        want |= {CONTROL: Status.PASS}
        assert out[mutation] == want, mutation


@pytest.mark.timeout(300)
@pytest.mark.parametrize("protocol", ["grpc", "connect"])
def test_a_dispatch_before_the_welcome_fails_the_order_check_and_nothing_else(protocol: str) -> None:
    """A server whose Dispatches precede the Welcome fails only server.5.3.welcome-before-any-dispatch."""

    async def main() -> list[object]:
        env = {**os.environ, "MUTATION": "dispatch-before-welcome"}
        proc = _MutantServer(SHORT_TIMINGS, env=env)
        await asyncio.to_thread(proc.start)
        try:
            config = SuiteConfig(server=proc.url, only=("server",), protocol=protocol, concurrency=8)
            summary = await run_suite(config)
        finally:
            assert await asyncio.to_thread(stop_server, proc) == 0
        return list(summary.results)

    results = asyncio.run(main())
    got = failing(results)  # type: ignore[arg-type]
    assert list(got) == ["server.5.3.welcome-before-any-dispatch"], got
    assert "before the Welcome (dispatch" in got["server.5.3.welcome-before-any-dispatch"]
