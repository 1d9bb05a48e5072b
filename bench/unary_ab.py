"""A/B of the reference server's sequential unary Enqueue: two checkouts' servers, interleaved rounds.

    git clone -q . /tmp/base && git -C /tmp/base checkout -q REV
    .venv/bin/python bench/unary_ab.py --base /tmp/base [--new .] [--rounds 7] [--calls 2000]

Each round starts one server from each checkout (``python -m conveyor_server_min`` with that
checkout first on ``PYTHONPATH``, in alternating order) and makes ``--calls`` sequential
``await client.enqueue(...)`` calls with this tree's client, after 200 warm-up calls. Printed: the
medians of calls/s, producer CPU and server CPU per call for each side, and the new/base ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from conveyor_sdk.client import Client  # noqa: E402
from conveyor_server_min.testing import ServerProcess  # noqa: E402

CLK = os.sysconf("SC_CLK_TCK")


def _cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK


async def _round(url: str, pid: int, calls: int) -> tuple[float, float, float]:
    client = Client(url)
    try:
        for _ in range(200):
            await client.enqueue("noop", b"", queue="ab")
        server0, own0, t0 = _cpu(pid), time.process_time(), time.perf_counter()
        for _ in range(calls):
            await client.enqueue("noop", b"", queue="ab")
        wall = time.perf_counter() - t0
        return calls / wall, (time.process_time() - own0) / calls * 1e6, (_cpu(pid) - server0) / calls * 1e6
    finally:
        await client.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="checkout of the base revision")
    parser.add_argument("--new", default=str(ROOT), help="checkout to compare (default: this one)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=2000)
    opts = parser.parse_args()
    trees = {"base": str(Path(opts.base).resolve()), "new": str(Path(opts.new).resolve())}
    results: dict[str, list[tuple[float, float, float]]] = {name: [] for name in trees}
    for r in range(opts.rounds):
        order = list(trees.items()) if r % 2 == 0 else list(trees.items())[::-1]
        for name, tree in order:
            # PYTHONSAFEPATH: ``-m`` must not put the working directory (maybe the other checkout) first.
            env = {**os.environ, "PYTHONPATH": tree, "PYTHONSAFEPATH": "1"}
            with ServerProcess(env=env) as server:
                assert server.proc is not None
                results[name].append(asyncio.run(_round(server.url, server.proc.pid, opts.calls)))
    medians = {
        name: [statistics.median(run[i] for run in runs) for i in range(3)] for name, runs in results.items()
    }
    for name, (rate, own, srv) in medians.items():
        print(f"{name:<5} {rate:>8,.0f} calls/s  producer {own:5.0f} us  server {srv:5.0f} us per call")
    base, new = medians["base"], medians["new"]
    ratios = f"rate {new[0] / base[0]:.2f}x, server CPU {new[2] / base[2]:.2f}x"
    print(f"new/base: {ratios}; load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
