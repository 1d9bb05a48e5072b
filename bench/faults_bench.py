"""Network faults for minutes: the full table (fault x target x server). Not run in CI.

    python bench/faults_bench.py                         # every fault, both targets, reference server plain
    python bench/faults_bench.py --servers plain,db --faults blackhole,resets --targets worker
    python bench/faults_bench.py --long                  # adds the 180 s blackhole
    CONVEYORD=/work/upstream-build/bin/conveyord BASE=29700 GOMAXPROCS=4 LEASE_TTL=6s REAP_INTERVAL=1s \\
        bash /work/shared/tools/conveyord.sh dev
    python bench/faults_bench.py --servers conveyord --conveyord http://127.0.0.1:29710

Each run (tests/faults/scenario.py): --tasks tasks of --work seconds are enqueued directly to
the server, spread over the run; the worker (in-process ``Worker``, or ``conveyor worker
--processes 2``) reaches the server only through a FaultProxy. The fault starts --warmup
seconds in: both directions blackholed (--hold-blackhole, 30 s; with --long also 180 s),
one-way drops each way (--hold), 200 ms latency (--hold), 5 resets spread over --hold, or
connections refused for --hold-refuse (20 s; open sessions are reset first). Then it heals
and the run settles. The reference server runs with --lease 6s; the worker with its
defaults (keepalive, reconnect backoff): this is what a deployment gets.

Columns: lost (acknowledged, never finished), archived unrun (ARCHIVED without a ledger
start), noticed s (fault to the worker's first warning / non-open phase / non-200 /readyz,
during the fault only), readyz s (runtime), resumed s (heal to the first start after it),
duplicates (tasks started more than once: at-least-once allows them).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.faults.scenario: the runner

from conveyor_server_min.testing import ServerProcess
from tests.faults.scenario import FAULTS, HEADER, Report, Scenario, run


def _scenarios(args: argparse.Namespace) -> list[tuple[str, Scenario]]:
    out: list[tuple[str, Scenario]] = []
    for target in args.targets.split(","):
        for fault in args.faults.split(","):
            if fault not in FAULTS:
                sys.exit(f"faults_bench: unknown fault {fault!r} (one of {', '.join(FAULTS)})")
            holds = {
                "blackhole": [args.hold_blackhole] + ([180.0] if args.long else []),
                "refuse": [args.hold_refuse],
            }
            for hold in holds.get(fault, [args.hold]):
                sc = Scenario(
                    fault, target, hold=hold, tasks=args.tasks, work=args.work, warmup=args.warmup,
                    after=args.after, settle=args.settle, max_retry=args.max_retry,
                )  # fmt: skip
                out.append((f"{fault} {hold:g}s", sc))
    return out


async def _run_on(name: str, url: str, args: argparse.Namespace, rows: list[str]) -> None:
    for label, sc in _scenarios(args):
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="faults-") as folder:
            report: Report = await run(sc, url, Path(folder), server_name=name)
        report.fault = label
        rows.append(report.row())
        took = time.monotonic() - started
        print(f"{report.row()}  {report.executions} executions of {report.acked}; "
              f"noticed by: {report.noticed_by or '-'}; {took:.0f} s", flush=True)  # fmt: skip


async def main(args: argparse.Namespace) -> None:
    rows: list[str] = []
    print(HEADER, flush=True)
    for name in args.servers.split(","):
        if name == "conveyord":
            if not args.conveyord:
                sys.exit("faults_bench: --servers conveyord needs --conveyord URL")
            await _run_on(name, args.conveyord, args, rows)
            continue
        if name not in ("plain", "db"):
            sys.exit(f"faults_bench: unknown server {name!r} (plain, db or conveyord)")
        with tempfile.TemporaryDirectory(prefix="faults-db-") as folder:
            flags = ["--lease-ttl", args.lease, "--reap-interval", "1s"]
            flags += ["--db", str(Path(folder) / "conveyor.db")] if name == "db" else []
            with ServerProcess(flags) as server:
                await _run_on(name, server.url, args, rows)
    print("\n" + HEADER + "\n" + "\n".join(rows))


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--faults", default=",".join(FAULTS))
    p.add_argument("--targets", default="worker,runtime", help="worker, runtime or both")
    p.add_argument("--servers", default="plain", help="plain, db, conveyord (comma-separated)")
    p.add_argument("--conveyord", default="", help="API URL of a running conveyord (dev mode)")
    p.add_argument("--tasks", type=int, default=300)
    p.add_argument("--work", type=float, default=0.1, help="seconds per task")
    p.add_argument("--warmup", type=float, default=3.0)
    p.add_argument("--after", type=float, default=3.0, help="producer keeps going this long after heal")
    p.add_argument("--settle", type=float, default=90.0)
    p.add_argument("--hold", type=float, default=30.0, help="one-way drops, latency, resets")
    p.add_argument("--hold-blackhole", type=float, default=30.0)
    p.add_argument("--hold-refuse", type=float, default=20.0)
    p.add_argument("--long", action="store_true", help="also a 180 s blackhole")
    p.add_argument("--lease", default="6s", help="reference server --lease-ttl")
    p.add_argument("--max-retry", type=int, default=5)
    return p.parse_args()


if __name__ == "__main__":
    args = _args()
    if args.targets and not set(args.targets.split(",")) <= {"worker", "runtime"}:
        sys.exit("faults_bench: --targets takes worker and/or runtime")
    asyncio.run(main(args))
