"""The whole suite against the reference server, with the reference workers and our SDK worker."""

from __future__ import annotations

import asyncio

import pytest

from conveyor_conformance import Status, SuiteConfig, run_suite
from tests.conformance._helpers import RAW_WORKER, SDK_WORKER, failing, run_variants


def test_server_checks_pass_against_conveyor_server_min() -> None:
    """Every server.* check passes (or is n/a for optional admin RPCs) against the suite-started server."""
    summary = asyncio.run(run_suite(SuiteConfig(only=("server",), concurrency=8)))
    assert failing(summary.results) == {}
    assert summary.count(Status.PASS) >= 40
    na = {r.id: r.detail for r in summary.results if r.status is Status.NOT_APPLICABLE}
    assert all("AdminService" in d for d in na.values()), na


@pytest.mark.timeout(400)
@pytest.mark.parametrize("protocol", ["grpc", "connect"])
def test_worker_and_sdk_checks_pass_with_the_raw_reference_worker(protocol: str) -> None:
    """The frame-level reference worker passes every sdk.* and worker.* check over gRPC and Connect."""
    from conveyor_conformance import default_registry

    ids = [c.id for c in default_registry().select(["sdk", "worker"])]
    env = {"CONVEYOR_PROTOCOL": protocol}
    out = asyncio.run(run_variants({"raw": (ids, RAW_WORKER, env)}, concurrency=6))
    assert failing(out["raw"]) == {}
    assert all(r.status is Status.PASS for r in out["raw"])


@pytest.mark.timeout(400)
@pytest.mark.parametrize(
    ("protocol", "content_type"), [("grpc", "application/grpc"), ("connect", "application/connect+proto")]
)
def test_worker_and_sdk_checks_pass_with_our_sdk_worker(protocol: str, content_type: str) -> None:
    """Our SDK (conveyor conformance worker) passes every sdk.* and worker.* check in both transport modes."""
    from conveyor_conformance import default_registry

    ids = [c.id for c in default_registry().select(["sdk", "worker"])]
    env = {"CONVEYOR_PROTOCOL": protocol}
    out = asyncio.run(run_variants({"sdk": (ids, SDK_WORKER, env)}, concurrency=6))
    assert failing(out["sdk"]) == {}
    assert all(r.status is Status.PASS for r in out["sdk"]), {r.id: r.detail for r in out["sdk"]}
    opened = {r.id: r.detail for r in out["sdk"]}["sdk.9.opens-h2-session-with-bearer"]
    assert f"{protocol} ({content_type})" in opened  # the peer answered in the program's own protocol


def test_a_program_declaring_nothing_gets_not_applicable_never_fail() -> None:
    """With nothing declared, extension-bound checks are n/a naming the extension; the rest still pass."""
    ids = [
        "sdk.9.opens-h2-session-with-bearer",
        "sdk.9.hello-first-with-valid-fields",
        "sdk.9.outcome-mapping",
        "sdk.9.exception-maps-to-retry",
        "sdk.9.honours-cancel",
        "sdk.9.json-payload-byte-compatible",
        "sdk.9.one-result-per-dispatch",
        "sdk.9.concurrent-up-to-concurrency-without-credit",
    ]
    out = asyncio.run(run_variants({"bare": (ids, RAW_WORKER, {})}, declares=()))
    got = {r.id: (r.status, r.detail) for r in out["bare"]}
    assert failing(out["bare"]) == {}
    for check_id, name in [
        ("sdk.9.outcome-mapping", "conformance:skip"),
        ("sdk.9.exception-maps-to-retry", "conformance:fail"),
        ("sdk.9.honours-cancel", "conformance:cancellable"),
        ("sdk.9.json-payload-byte-compatible", "conformance:json"),
        ("sdk.9.opens-h2-session-with-bearer", "CONVEYOR_TOKEN"),
    ]:
        assert got[check_id][0] is Status.NOT_APPLICABLE, got[check_id]
        assert f"program does not declare {name}" in got[check_id][1]
    for check_id in (ids[1], ids[-2], ids[-1]):
        assert got[check_id][0] is Status.PASS, got[check_id]
    assert got["sdk.9.one-result-per-dispatch"][1].startswith("one Result per task (t-ok)")


def test_foreign_server_with_token_and_long_lease() -> None:
    """A foreign server (token, 60 s lease): auth runs; lease-bound and tokenless checks are n/a."""
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
        only = ("worker.5.10.drain-exits-cleanly",)
        bare = SuiteConfig(server=proc.url, token="cf-token", only=only, declares=())
        (tokenless,) = asyncio.run(run_suite(bare)).results
    finally:
        assert stop_server(proc) == 0
    got = {r.id: r.status for r in summary.results}
    assert failing(summary.results) == {}
    assert all(got[i] is Status.PASS for i in got if i.startswith(("server.2.", "server.5.3.", "server.6.")))
    lease_bound = [r for r in summary.results if r.id.startswith(("server.5.6.", "worker.5.6."))]
    assert lease_bound and all(r.status is Status.NOT_APPLICABLE for r in lease_bound)
    assert all("needs a 2 s lease" in r.detail for r in lease_bound)
    assert tokenless.status is Status.NOT_APPLICABLE
    assert "does not declare CONVEYOR_TOKEN" in tokenless.detail
