"""The conformance suite's whole server family against a server running on the durable SQLite store."""

from __future__ import annotations

import asyncio
from pathlib import Path

from conveyor_conformance import Status, SuiteConfig, run_suite
from conveyor_conformance.harness import SHORT_TIMINGS, stop_server
from conveyor_server_min.testing import ServerProcess
from tests.conformance._helpers import failing


def test_server_family_passes_with_db(tmp_path: Path) -> None:
    """Every server.* check passes against ``--db`` (auth checks included, via a token)."""
    proc = ServerProcess(["--token", "cf-db-token", "--db", str(tmp_path / "cf.db"), *SHORT_TIMINGS])
    proc.start()
    try:
        assert any("store: sqlite" in line for line in proc.output)
        config = SuiteConfig(server=proc.url, token="cf-db-token", only=("server",), concurrency=8)
        summary = asyncio.run(run_suite(config))
    finally:
        assert stop_server(proc) == 0
    assert failing(summary.results) == {}
    assert summary.count(Status.PASS) >= 40
    na = {r.id: r.detail for r in summary.results if r.status is Status.NOT_APPLICABLE}
    assert all("AdminService" in d for d in na.values()), na
