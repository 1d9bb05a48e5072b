"""The suite can fail: deliberately broken workers and a broken server fail exactly the checks they break."""

from __future__ import annotations

import asyncio
import sys

from conveyor_conformance import Status, SuiteConfig, default_registry, run_suite
from conveyor_conformance.harness import SHORT_TIMINGS, stop_server
from conveyor_server_min.testing import ServerProcess
from tests.conformance._helpers import RAW_WORKER, run_variants

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
    "exception-as-success": ["sdk.9.exception-maps-to-retry"],
    "serial": ["sdk.9.concurrent-up-to-concurrency-without-credit"],
    "sends-credit": ["sdk.9.concurrent-up-to-concurrency-without-credit"],
    "crash-on-ping": ["sdk.9.tolerates-ping"],
    "reconnect-no-jitter": ["sdk.9.reconnects-with-full-jitter"],
    "no-reset-backoff": ["sdk.9.reconnect-counter-resets-after-welcome"],
    "reconnect-on-fatal": ["sdk.9.stops-on-fatal-unauthenticated", "sdk.9.stops-on-fatal-protocol-error"],
    "accept-bad-hello": ["worker.5.2.bad-hello-rejected-locally"],
    "start-late-dispatch": ["sdk.5.10.late-dispatch-heartbeated-not-started"],
}


def test_each_worker_mutant_fails_the_checks_it_breaks() -> None:
    """Every raw-worker mutation makes its target checks FAIL (not error, not pass)."""
    variants = {m: (ids, RAW_WORKER, {"MUTATION": m}) for m, ids in WORKER_MUTANTS.items()}
    out = asyncio.run(run_variants(variants, concurrency=8))
    wrong = {
        m: {r.id: f"{r.status.value}: {r.detail}" for r in results if r.status is not Status.FAIL}
        for m, results in out.items()
    }
    assert {m: w for m, w in wrong.items() if w} == {}


def test_every_mutant_target_exists() -> None:
    """The mutant table names real checks only."""
    reg = default_registry()
    for ids in WORKER_MUTANTS.values():
        for check_id in ids:
            assert check_id in reg


class _NoCreditServer(ServerProcess):
    def command(self) -> list[str]:
        cmd = super().command()
        return [sys.executable, "-m", "conveyor_conformance.mutants.server_no_credits", *cmd[3:]]


def test_server_ignoring_credits_fails_the_credit_checks() -> None:
    """A server that dispatches beyond Hello.concurrency fails the §5.5 credit checks, and only those."""
    proc = _NoCreditServer(SHORT_TIMINGS)
    proc.start()
    try:
        config = SuiteConfig(server=proc.url, only=("server.5.5", "server.6.2"))
        summary = asyncio.run(run_suite(config))
    finally:
        assert stop_server(proc) == 0
    got = {r.id: r.status for r in summary.results}
    assert got["server.5.5.credits-never-exceeded"] is Status.FAIL
    assert got["server.5.5.result-refills-one-credit"] is Status.FAIL
    assert got["server.6.2.get-task-errors"] is Status.PASS
