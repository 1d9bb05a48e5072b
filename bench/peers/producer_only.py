"""Only the producer workload of ``run.py`` (sequential single enqueues), for our checkouts and Dramatiq.

    .venv/bin/python bench/peers/producer_only.py [--base CHECKOUT] [--rounds 3] [--calls 1000]

Each round runs, in a rotated order: ours from this checkout, ours from ``--base`` (when given:
its own ``.venv``, server and client both from it) and Dramatiq on a fresh Redis, each through
``run.Bench._sequential``, the same code as the full table's "one producer" columns. Printed: per
system the medians of enqueues/s, producer CPU and broker/server CPU per enqueue, and each of
ours against Dramatiq's rate. The CPU figures come from /proc ticks (10 ms over ``--calls``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent

CHILD = """
import json, os, sys, tempfile
here = sys.argv[1]
sys.path[:0] = [here, os.path.join(here, 'apps'), os.path.dirname(os.path.dirname(here))]
import run, _systems
system = next(s for s in _systems.OURS + _systems.REDIS if s.key == sys.argv[2])
bench = run.Bench(run.Sizes(noop=0, lat=0, cpu=0, seq=int(sys.argv[3]), timeout=300), None)
result = run.Run()
with tempfile.TemporaryDirectory(prefix='peers-') as tmp:
    broker = bench._broker(system, run.Path(tmp))
    env = {**os.environ, 'PEERS_OUT': tmp, 'PEERS_BROKER': broker.url, 'PEERS_QUEUE': 'producer',
           'PEERS_ROUNDS': '1', 'PYTHONPATH': _systems.PYTHONPATH}
    env.pop('VIRTUAL_ENV', None)
    try:
        bench._sequential(system, broker, env, result)
    finally:
        broker.close()
print(json.dumps([result.seq_rate, result.seq_producer_us, result.seq_broker_us]))
"""


def _run(tree: Path, key: str, calls: int) -> list[float]:
    python = tree / ".venv" / "bin" / "python"
    here = tree / "bench" / "peers"
    done = subprocess.run(
        [str(python), "-c", CHILD, str(here), key, str(calls)],
        capture_output=True,
        text=True,
        cwd=tree,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{key} from {tree} failed: {done.stderr.strip().splitlines()[-1:]}")
    return [float(v) for v in json.loads(done.stdout.strip().splitlines()[-1])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, help="another checkout to run ours from as well")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=1000)
    args = parser.parse_args()
    this = HERE.parents[1]
    systems = [("ours", this, "ours"), ("Dramatiq", this, "dramatiq")]
    if args.base is not None:
        systems.insert(1, ("ours, base", args.base.resolve(), "ours"))
    rows: dict[str, list[list[float]]] = {name: [] for name, _, _ in systems}
    for r in range(args.rounds):
        for name, tree, key in systems[r % len(systems) :] + systems[: r % len(systems)]:
            rows[name].append(_run(tree, key, args.calls))
    medians = {
        name: [statistics.median(col) for col in zip(*runs, strict=True)] for name, runs in rows.items()
    }
    for name, (rate, producer, broker) in medians.items():
        print(
            f"{name:<12} {rate:8,.0f} enqueues/s  producer {producer:5.0f} us  broker/server {broker:5.0f} us"
        )
    for name in medians:
        if name != "Dramatiq":
            print(f"{name} / Dramatiq enqueue rate: {medians[name][0] / medians['Dramatiq'][0]:.2f}x")


if __name__ == "__main__":
    main()
