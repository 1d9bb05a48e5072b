"""A/B of the producer client: two checkouts' clients alternating against one reference server.

    .venv/bin/python bench/producer_ab.py --base /path/to/base/checkout [--new .] [--pairs 6]
        [--calls 3000] [--payload empty|json]

Each checkout needs its own ``.venv`` (an editable install of itself). One server runs from this
tree (``python -m conveyor_server_min --dev``); each pair runs a fresh producer process from each
checkout, in alternating order, making ``--calls`` sequential ``await client.enqueue(...)`` after
300 warm-up calls. Printed: the medians of producer CPU per call (``time.process_time``) and
calls/s per side, and the new/base CPU ratio. CPU per call is the figure to trust on a loaded
machine; calls/s also moves with the server's and the machine's load.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from conveyor_server_min.testing import ServerProcess  # noqa: E402

CHILD = """
import asyncio, sys, time
from conveyor_sdk.client import Client
PAYLOAD = {'user_id': 42, 'email': 'someone@example.com'} if sys.argv[3] == 'json' else b''
async def main(url, n):
    async with Client(url) as client:
        for _ in range(300):
            await client.enqueue('ab', PAYLOAD, queue='ab')
        cpu, wall = time.process_time(), time.perf_counter()
        for _ in range(n):
            await client.enqueue('ab', PAYLOAD, queue='ab')
        print((time.process_time() - cpu) / n * 1e6, n / (time.perf_counter() - wall))
asyncio.run(main(sys.argv[1], int(sys.argv[2])))
"""


def _one(tree: Path, url: str, calls: int, payload: str) -> tuple[float, float]:
    python = tree / ".venv" / "bin" / "python"
    done = subprocess.run(
        [str(python), "-c", CHILD, url, str(calls), payload],
        capture_output=True,
        text=True,
        cwd=tree,
        check=True,
    )
    cpu, rate = map(float, done.stdout.split())
    return cpu, rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, required=True, help="checkout of the base revision")
    parser.add_argument("--new", type=Path, default=ROOT, help="checkout to compare (default: this one)")
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--payload", choices=("empty", "json"), default="empty")
    args = parser.parse_args()
    sides = {"base": args.base.resolve(), "new": args.new.resolve()}
    runs: dict[str, list[tuple[float, float]]] = {"base": [], "new": []}
    with ServerProcess(["--dev"]) as server:
        for pair in range(args.pairs):
            for name in ("base", "new") if pair % 2 == 0 else ("new", "base"):
                runs[name].append(_one(sides[name], server.url, args.calls, args.payload))
    for name, rows in runs.items():
        cpu = statistics.median(c for c, _ in rows)
        rate = statistics.median(r for _, r in rows)
        each = [round(c) for c, _ in rows]
        print(f"{name:<5} producer CPU {cpu:6.1f} us/call  {rate:7,.0f} calls/s  (CPU per pair: {each})")
    ratio = statistics.median(c for c, _ in runs["new"]) / statistics.median(c for c, _ in runs["base"])
    print(f"new/base producer CPU per call: {ratio:.2f}x")


if __name__ == "__main__":
    main()
