"""The server's part of enqueue→start: its CPU from an Enqueue's read to the Dispatch's write.

    .venv/bin/python bench/server_path_bench.py --tree main=../main --tree new=. [--gaps 0,10] [--tasks 300]

One idle worker (``bench/_latency_workers.py ours``, this tree) holds credit on its queue; this
process enqueues ``--tasks`` tasks one at a time, ``gap`` ms apart, and the handler stamps its start.
In the server (each ``--tree NAME=DIR`` checkout in turn, interleaved per gap), a probe imported at
start (a ``sitecustomize`` on its ``PYTHONPATH``) reads the thread CPU clock when a producer's read
enters ``H2Connection.data_received``, after the Dispatch leaves through another connection's
``flush_now``, and when the read is done. Printed per tree and gap, medians after 50 tasks: read →
Dispatch written, the whole read, and the enqueue→start p50. The gap shows what an idle server
costs: the same Python takes more CPU once its caches went cold (``latency_bench.py`` uses 20 ms).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from conveyor_sdk.client import Client  # noqa: E402
from conveyor_server_min.testing import ServerProcess  # noqa: E402

_PROBE = """
import atexit, os, time
from conveyor_server_min._http import h2conn

_clock = time.thread_time_ns
_now = [0, None]
_dispatch, _whole = [], []
_C = h2conn.H2Connection
_received, _flush_now = _C.data_received, _C.flush_now


def data_received(self, data):
    _now[0], _now[1] = _clock(), self
    _received(self, data)
    if _now[1] is self and _now[2:]:
        _whole.append(_clock() - _now[0])
    del _now[2:]
    _now[1] = None


def flush_now(self, st):
    _flush_now(self, st)
    if _now[1] is not None and _now[1] is not self and not _now[2:]:
        _dispatch.append(_clock() - _now[0])
        _now.append(True)  # this read carried a Dispatch: an Enqueue's read


_C.data_received, _C.flush_now = data_received, flush_now


@atexit.register
def _dump():
    with open(os.environ["SERVER_PATH_OUT"], "w") as f:
        f.write(" ".join(map(str, _dispatch)) + "\\n" + " ".join(map(str, _whole)) + "\\n")
"""


def _lines(path: str) -> int:
    """Lines the worker wrote so far (0 before its first)."""
    return len(Path(path).read_text().splitlines()) if os.path.exists(path) else 0


async def _produce(url: str, started: str, tasks: int, gap: float) -> dict[int, int]:
    """Enqueue the warm-up task, then ``tasks`` tasks ``gap`` s apart; their send times."""
    sent: dict[int, int] = {}
    async with Client(url) as client:
        await client.enqueue("lat", b"-1", queue="path", content_type="application/octet-stream")
        end = time.monotonic() + 60
        while not _lines(started):
            if time.monotonic() > end:
                raise TimeoutError("the worker never ran its warm-up task")
            await asyncio.sleep(0.02)
        for i in range(1, tasks + 1):
            sent[i] = time.monotonic_ns()
            await client.enqueue("lat", b"%d" % i, queue="path", content_type="application/octet-stream")
            await asyncio.sleep(gap)
        end = time.monotonic() + 30
        while _lines(started) <= tasks:
            if time.monotonic() > end:
                raise TimeoutError("the worker did not start every task")
            await asyncio.sleep(0.02)
    return sent


def _run(tree: str, hook: str, tmp: str, tasks: int, gap: float) -> tuple[float, float, float]:
    out, started = os.path.join(tmp, "server.txt"), os.path.join(tmp, "started.txt")
    if os.path.exists(started):
        os.remove(started)
    env = {
        **os.environ,
        "PYTHONPATH": f"{Path(tree).resolve()}{os.pathsep}{hook}",
        "PYTHONSAFEPATH": "1",  # ``-m`` must not put the working directory (maybe another checkout) first
        "SERVER_PATH_OUT": out,
    }
    with ServerProcess(env=env) as server:
        worker = subprocess.Popen(
            [sys.executable, str(ROOT / "bench" / "_latency_workers.py"), "ours", server.url, "path"],
            env={**os.environ, "LAT_OUT": started, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
        try:
            sent = asyncio.run(_produce(server.url, started, tasks, gap))
        finally:
            worker.terminate()
            worker.wait(30)
    stamps = dict(map(int, line.split()) for line in Path(started).read_text().splitlines())
    latency = [(stamps[i] - sent[i]) / 1e6 for i in range(1, tasks + 1)]
    dispatch, whole = ([int(x) for x in line.split()][50:] for line in Path(out).read_text().splitlines())
    return statistics.median(dispatch) / 1e3, statistics.median(whole) / 1e3, statistics.median(latency)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", action="append", required=True, help="NAME=DIR, a checkout (repeatable)")
    parser.add_argument("--gaps", default="0,10", help="ms between tasks, comma-separated")
    parser.add_argument("--tasks", type=int, default=300)
    opts = parser.parse_args()
    trees = dict(spec.partition("=")[::2] for spec in opts.tree)
    with tempfile.TemporaryDirectory() as hook, tempfile.TemporaryDirectory() as tmp:
        Path(hook, "sitecustomize.py").write_text(_PROBE)
        for gap_ms in (float(g) for g in opts.gaps.split(",")):
            for name, tree in trees.items():
                dispatch, whole, p50 = _run(tree, hook, tmp, opts.tasks, gap_ms / 1e3)
                print(
                    f"gap {gap_ms:4g} ms  {name:<6} read -> Dispatch written {dispatch:6.1f} us CPU, "
                    f"whole read {whole:6.1f} us, enqueue->start p50 {p50:.3f} ms"
                )
    print(f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
