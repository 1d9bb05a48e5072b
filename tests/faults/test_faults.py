"""Each network fault against the in-process Worker and `conveyor worker --processes 2`, smoke size.

A real reference server (plain and ``--db``), a FaultProxy between worker and server, and a
ledger of every execution (tests/faults/scenario.py). Short lease and keepalive settings make a
dead link cheap to notice; bench/faults_bench.py runs the same scenarios for minutes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from conveyor_server_min.testing import ServerProcess
from tests.faults.scenario import HEADER, Fault, Report, Scenario, Target, run

pytestmark = pytest.mark.slow

LEASE = 2.0  # longer than the keepalive notices a dead link (see NOTICE_BOUND): a lease outlives it
KA_INTERVAL, KA_TIMEOUT = 0.5, 1.0
NOTICE_BOUND = KA_INTERVAL + KA_TIMEOUT + 0.5  # last answer, next PING, its timeout, slack for 2 cores
RESUME_BOUND = 2.0
REFUSE_HOLD = 8.0  # five refused connects: the default backoff's ceiling is 16 s by the heal
SERVER_ARGS = ("--lease-ttl", f"{LEASE}s", "--reap-interval", "100ms", "--promote-interval", "100ms")
DEAD_LINK: tuple[Fault, ...] = ("blackhole", "drop-up", "drop-down")
_PRINTED: list[Report] = []


@pytest.fixture(scope="module", params=["plain", "db"])
def fault_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """The reference server with a 2 s lease, in memory or over ``--db``; it must exit cleanly."""
    args = list(SERVER_ARGS)
    if request.param == "db":
        args += ["--db", str(tmp_path_factory.mktemp("faultdb") / "conveyor.db")]
    proc = ServerProcess(args)
    proc.start()
    proc.kind = request.param  # type: ignore[attr-defined]
    yield proc
    assert proc.stop() == 0, "".join(proc.output[-20:])


def _worker_args(target: Target, fault: Fault) -> dict[str, object]:
    """A short keepalive, so a smoke run notices a dead link in seconds; the reconnect backoff at
    its defaults (0.5 s base, 30 s cap): the heal probe, not a small cap, must bring the work back
    within 2 s. The in-process worker draws the worst jitter (0.99 of each ceiling)."""
    if target == "worker":
        return {"keepalive_interval": KA_INTERVAL, "keepalive_timeout": KA_TIMEOUT, "rng": lambda: 0.99}
    return {"keepalive_interval": f"{KA_INTERVAL}s", "keepalive_timeout": f"{KA_TIMEOUT}s"}


def _run(
    fault: Fault, target: Target, server: ServerProcess, folder: Path, capsys: pytest.CaptureFixture[str]
) -> Report:
    hold = 4.0 if fault in DEAD_LINK else 2.0  # a dead link for two leases: lapses and retries happen
    if fault == "refuse":
        hold = REFUSE_HOLD
    scenario = Scenario(
        fault, target, hold=hold, tasks=30, warmup=1.0, after=1.0, settle=30.0, max_retry=2,
        worker_args=_worker_args(target, fault),
    )  # fmt: skip
    report = asyncio.run(run(scenario, server.url, folder, server_name=server.kind))  # type: ignore[attr-defined]
    with capsys.disabled():  # the duplicates (and the rest of the row) are printed, not asserted
        header = "" if _PRINTED else "\n" + HEADER
        print(f"{header}\n{report.row()}  ({report.executions} executions)")
    _PRINTED.append(report)
    return report


def _check(report: Report, fault: Fault) -> None:
    row = report.row()
    assert report.acked == 30, row
    assert report.lost == 0, row
    assert report.archived_unrun == 0, row
    if fault == "latency":
        assert report.noticed is None, f"200 ms latency was taken for a dead link: {report.noticed_by}"
    else:
        bound = NOTICE_BOUND if fault in DEAD_LINK else 0.5
        assert report.noticed is not None and report.noticed <= bound, row
    if report.target == "runtime" and fault != "latency":
        assert report.readyz is not None and report.readyz <= NOTICE_BOUND + 0.3, f"/readyz: {row}"
    assert report.resumed is not None and report.resumed <= RESUME_BOUND, row


@pytest.mark.parametrize("fault", ["blackhole", "drop-up", "drop-down", "latency", "resets", "refuse"])
def test_in_process_worker_under_fault(
    fault: Fault, fault_server: ServerProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """In-process Worker: 0 lost, 0 archived unrun, dead link noticed in time, work resumes within 2 s."""
    _check(_run(fault, "worker", fault_server, tmp_path, capsys), fault)


@pytest.mark.parametrize("fault", ["blackhole", "drop-up", "drop-down", "latency", "resets", "refuse"])
def test_runtime_under_fault(
    fault: Fault, fault_server: ServerProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`conveyor worker --processes 2`: the same, and /readyz says not ready within the keepalive bound."""
    _check(_run(fault, "runtime", fault_server, tmp_path, capsys), fault)
