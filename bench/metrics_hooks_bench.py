"""The supervisor's per-job metrics cost: ``Metrics.job_started`` + ``job_finished``, this tree vs REV.

    .venv/bin/python bench/metrics_hooks_bench.py [--baseline REV] [--rounds 15] [--jobs 50000]

Loads ``conveyor_sdk/_runtime/metrics.py`` as it is here and as it was at ``--baseline`` (default
``439cbd1^``, the tree before the worker and custom metrics; ``git show``, the rest of the SDK is
this tree's), then times both hooks for one single-task no-op job, the two versions alternating
``--rounds`` times in one process. Prints min and median ns per job and the ratio of the medians:
the runtime bench (``runtime_bench.py --baseline``) measures the same end to end, where these few
microseconds are inside its noise.

Then, for ``--processes 0``: an async no-op job run by a real ``LocalExecutor``, plain and wrapped in
``observe.ObservedExecutor`` (what the supervisor uses so the per-task families exist in process),
alternated; the difference is what the in-process metrics cost per job.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from conveyor_sdk._runtime.metrics import Metrics  # noqa: E402
from conveyor_sdk._runtime.observe import ObservedExecutor  # noqa: E402
from conveyor_sdk._worker.executor import Executor, Job, JobControl, Outcome, OutcomeKind, TaskData  # noqa: E402
from conveyor_sdk._worker.local import LocalExecutor  # noqa: E402
from conveyor_sdk._worker.registry import Registry  # noqa: E402

SOURCE = "conveyor_sdk/_runtime/metrics.py"


def load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Child:
    """What the hooks read of a child: the types it registered."""

    types = frozenset({"noop"})
    name = "default-0"


def per_job_ns(module: ModuleType, jobs: int) -> float:
    task = TaskData(
        id="t1", queue="q", type="noop", payload=b"", content_type="", metadata={},
        retried=0, max_retry=3, enqueued_at=time.time(),
    )  # fmt: skip
    job, outcomes, child = (
        Job("t1", "q", "noop", (task,), False, None),
        [Outcome(OutcomeKind.SUCCESS)],
        Child(),
    )
    metrics = module.Metrics()
    started, finished = metrics.job_started, metrics.job_finished
    t0 = time.perf_counter()
    for _ in range(jobs):
        started(job, child)
        finished(job, outcomes, 0.001)
    return (time.perf_counter() - t0) / jobs * 1e9


async def in_process(rounds: int, jobs: int) -> dict[str, list[float]]:
    """us per job of a real LocalExecutor running an async no-op, plain and observed, alternated."""
    reg = Registry()

    @reg.handler("noop")
    async def noop(task: object, ctx: object) -> None:
        return None

    task = TaskData(
        id="t1", queue="q", type="noop", payload=b"", content_type="", metadata={},
        retried=0, max_retry=3, enqueued_at=time.time(),
    )  # fmt: skip
    job, control = Job("t1", "q", "noop", (task,), False, None), JobControl(report_progress=lambda *a: None)
    plain = LocalExecutor(reg, threads=4)
    observed = ObservedExecutor(LocalExecutor(reg, threads=4), Metrics(types=reg.types))
    sides: dict[str, Executor] = {"LocalExecutor": plain, "ObservedExecutor": observed}
    for ex in sides.values():
        await ex.start(lambda: None)
    runs: dict[str, list[float]] = {name: [] for name in sides}
    for i in range(rounds):
        for name in list(sides)[:: 1 if i % 2 == 0 else -1]:
            t0 = time.perf_counter()
            for _ in range(jobs):
                await sides[name].run(job, control)
            runs[name].append((time.perf_counter() - t0) / jobs * 1e6)
    for ex in sides.values():
        await ex.close(1.0)
    return runs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--baseline", default="439cbd1^", metavar="REV")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--jobs", type=int, default=50_000)
    opts = parser.parse_args()
    old = subprocess.run(
        ["git", "show", f"{opts.baseline}:{SOURCE}"], cwd=ROOT, check=True, capture_output=True
    )
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "metrics_base.py").write_bytes(old.stdout)
        versions = {
            "this tree": load("metrics_here", ROOT / SOURCE),
            opts.baseline: load("metrics_base", Path(tmp) / "metrics_base.py"),
        }
    runs: dict[str, list[float]] = {name: [] for name in versions}
    for i in range(opts.rounds):
        for name in list(versions)[:: 1 if i % 2 == 0 else -1]:  # alternate which goes first
            runs[name].append(per_job_ns(versions[name], opts.jobs))
    for name, values in runs.items():
        print(f"{name:<12} min {min(values):6.0f} ns  median {statistics.median(values):6.0f} ns per job")
    here, base = (statistics.median(v) for v in runs.values())
    print(f"ratio of the medians (this tree / {opts.baseline}): {here / base:.2f}")
    local = asyncio.run(in_process(opts.rounds, opts.jobs // 2))
    print("\n--processes 0: an async no-op job in a real LocalExecutor")
    for name, values in local.items():
        print(f"{name:<18} min {min(values):6.2f} us  median {statistics.median(values):6.2f} us per job")
    plain, observed = (statistics.median(v) for v in local.values())
    print(f"the in-process metrics cost {observed - plain:.2f} us per job (median difference)")


if __name__ == "__main__":
    main()
