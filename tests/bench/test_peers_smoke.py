"""The peers bench's smoke mode: every system it can run here completes a few hundred tasks.

Our own systems (``conveyor worker`` and the in-process Worker on the reference server) run
always; each peer (Celery, Dramatiq, Taskiq on Redis; conveyorq) only where its venv and
redis-server exist (bench/peers/README.md), so CI needs none of them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "bench" / "peers" / "run.py"


@pytest.mark.timeout(900)  # six systems' start-ups on a loaded 2-core machine
def test_smoke_every_available_system_completes(tmp_path: Path) -> None:
    """The smoke run exits 0 and has figures for every workload of every system it did not skip."""
    report = tmp_path / "runs.json"
    done = subprocess.run(
        [sys.executable, str(RUN), "--smoke", "--json", str(report)],
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    runs = json.loads(report.read_text())
    assert {"conveyor worker, defaults", "in-process Worker, defaults"} <= set(runs)
    skipped = [line for line in done.stdout.splitlines() if line.startswith("skipped ")]
    for line in skipped:  # a skip always says why
        assert ": " in line, line
    for name, rounds in runs.items():
        (run,) = rounds
        assert not run["errors"], (name, run["errors"])
        for figure in ("noop_rate", "p50_ms", "cpu_rate", "seq_rate"):
            assert run[figure] and run[figure] > 0, (name, figure, run)
    if skipped:
        print("\n".join(skipped))


def test_a_worker_that_dies_is_reported_not_timed() -> None:
    """A system whose worker exits before its first task yields an error, not figures."""
    sys.path.insert(0, str(RUN.parent))
    try:
        import run as peers  # bench/peers/run.py
        from _systems import System
    finally:
        sys.path.remove(str(RUN.parent))
    broken = System("exits at once", "ours", sys.executable, "ours", ("-c", "raise SystemExit(3)"))
    result = peers.Bench(peers.SMOKE, None).run(broken)
    assert result.errors == ["RuntimeError: worker exited 3 before its first task"]
    assert result.noop_rate is None and result.cpu_rate is None
