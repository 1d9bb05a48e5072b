"""The reference server's user and system CPU per sequential Enqueue, beside a "floor" server.

    .venv/bin/python bench/server_floor.py --tree old=/tmp/old --tree new=. [--rounds 5] [--calls 3000]

Each ``--tree NAME=DIR`` is a checkout whose server (``python -m conveyor_server_min`` with DIR first on
``PYTHONPATH``) takes ``--calls`` sequential ``client.enqueue`` calls from this tree's client, after
300 warm-up calls; the rounds alternate the order of the servers. The ``floor`` row is the last tree's
server with every request the kernel takes whole (``take_unary``) answered at once with one canned
EnqueueResponse: no router, no validation, no engine. It costs what every server on this event loop
and socket pays per call (the wake-up, the read, the write, the loop's turn, the frame parse), which no
change to the server's Python can remove. Printed: medians of user, system and total CPU per call from
``/proc/PID/stat`` (clock ticks: use enough calls that one tick is small against a call's cost).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from conveyor_sdk.client import Client  # noqa: E402
from conveyor_server_min.testing import ServerProcess  # noqa: E402

CLK = os.sysconf("SC_CLK_TCK")

# Imported by the floor server at start (a sitecustomize on its PYTHONPATH): replaces the handling of
# a request taken whole by the kernel's one-step answer with a fixed body.
_FLOOR = """
from conveyor_server_min._http import h2conn
from conveyor_sdk._h2kernel.server_conn import send_unary
from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb

_BODY = pb.EnqueueResponse(task=pb.TaskInfo(id="0" * 26, queue="ab", type="noop")).SerializeToString()


def _serve_taken(self, sid, raw, body):
    assert send_unary(self.h2, sid, "application/proto", _BODY)


h2conn.H2Connection._serve_taken = _serve_taken
"""


def _cpu(pid: int) -> tuple[float, float]:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / CLK, int(fields[12]) / CLK


async def _round(url: str, pid: int, calls: int) -> tuple[float, float]:
    client = Client(url)
    try:
        for _ in range(300):
            await client.enqueue("noop", b"", queue="ab")
        user0, sys0 = _cpu(pid)
        for _ in range(calls):
            await client.enqueue("noop", b"", queue="ab")
        user1, sys1 = _cpu(pid)
        return (user1 - user0) / calls * 1e6, (sys1 - sys0) / calls * 1e6
    finally:
        await client.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", action="append", required=True, help="NAME=DIR, a checkout (repeatable)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=3000)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as hook:
        Path(hook, "sitecustomize.py").write_text(_FLOOR)
        envs: dict[str, dict[str, str]] = {}
        for spec in opts.tree:
            name, _, tree = spec.partition("=")
            # PYTHONSAFEPATH: ``-m`` must not put the working directory (maybe another checkout) first.
            envs[name] = {**os.environ, "PYTHONPATH": str(Path(tree).resolve()), "PYTHONSAFEPATH": "1"}
        last = next(reversed(envs.values()))
        envs["floor"] = {**last, "PYTHONPATH": f"{last['PYTHONPATH']}{os.pathsep}{hook}"}
        results: dict[str, list[tuple[float, float]]] = {name: [] for name in envs}
        for r in range(opts.rounds):
            order = list(envs.items()) if r % 2 == 0 else list(envs.items())[::-1]
            for name, env in order:
                with ServerProcess(env=env) as server:
                    assert server.proc is not None
                    results[name].append(asyncio.run(_round(server.url, server.proc.pid, opts.calls)))
    for name, runs in results.items():
        user = statistics.median(run[0] for run in runs)
        system = statistics.median(run[1] for run in runs)
        total = statistics.median(run[0] + run[1] for run in runs)
        print(f"{name:<8} user {user:5.0f} us  sys {system:4.0f} us  total {total:5.0f} us per call")
    print(f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
