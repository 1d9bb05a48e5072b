"""The whole suite against the reference server, with the reference workers and our SDK worker."""

from __future__ import annotations

import asyncio

from conveyor_conformance import Status, SuiteConfig, run_suite
from tests.conformance._helpers import RAW_WORKER, SDK_WORKER, failing, run_variants


def test_server_checks_pass_against_conveyor_server_min() -> None:
    """Every server.* check passes (or is n/a for optional admin RPCs) against the suite-started server."""
    summary = asyncio.run(run_suite(SuiteConfig(only=("server",), concurrency=8)))
    assert failing(summary.results) == {}
    assert summary.count(Status.PASS) >= 40
    na = {r.id: r.detail for r in summary.results if r.status is Status.NOT_APPLICABLE}
    assert all("AdminService" in d for d in na.values()), na


def test_worker_and_sdk_checks_pass_with_the_raw_reference_worker() -> None:
    """The frame-level reference worker passes every sdk.* and worker.* check: the checks are satisfiable."""
    from conveyor_conformance import default_registry

    ids = [c.id for c in default_registry().select(["sdk", "worker"])]
    out = asyncio.run(run_variants({"raw": (ids, RAW_WORKER, {})}, concurrency=10))
    assert failing(out["raw"]) == {}
    assert all(r.status is Status.PASS for r in out["raw"])


def test_worker_and_sdk_checks_pass_with_our_sdk_worker() -> None:
    """Our SDK (conveyor conformance worker) passes every sdk.* and worker.* check."""
    from conveyor_conformance import default_registry

    ids = [c.id for c in default_registry().select(["sdk", "worker"])]
    out = asyncio.run(run_variants({"sdk": (ids, SDK_WORKER, {})}, concurrency=10))
    assert failing(out["sdk"]) == {}


def test_foreign_server_with_token_and_long_lease() -> None:
    """Against a server the suite did not start (token, 60 s lease): auth runs, short-lease checks are n/a."""
    from conveyor_conformance.harness import stop_server
    from conveyor_server_min.testing import ServerProcess

    proc = ServerProcess(["--token", "cf-token"])
    proc.start()
    try:
        config = SuiteConfig(
            server=proc.url,
            token="cf-token",
            only=("server.2", "server.5.3", "server.5.6", "worker.5.6", "server.6.1.enqueue-tx-atomic"),
        )
        summary = asyncio.run(run_suite(config))
    finally:
        assert stop_server(proc) == 0
    got = {r.id: r.status for r in summary.results}
    assert failing(summary.results) == {}
    assert all(got[i] is Status.PASS for i in got if i.startswith(("server.2.", "server.5.3.", "server.6.")))
    lease_bound = [r for r in summary.results if r.id.startswith(("server.5.6.", "worker.5.6."))]
    assert lease_bound and all(r.status is Status.NOT_APPLICABLE for r in lease_bound)
    assert all("needs a 2 s lease" in r.detail for r in lease_bound)
