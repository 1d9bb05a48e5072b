"""Server side of a conveyord failover, with bare sessions: how soon does a surviving node welcome?

    CONVEYORD=/work/upstream-build/bin/conveyord BASE=29000 GOMAXPROCS=4 \
        .venv/bin/python bench/setup_probe.py --kills 5

No SDK worker logic: raw Session streams through the SDK transport, every frame decided here.
Under load (a producer at --rate/s on nodes 2 and 3, one acking bare session per node), it kills
node 1 with ``conveyord.sh kill 1``, and meanwhile --probes bare clients per surviving node loop:
open a stream, send Hello, wait for the Welcome (or the stream's end, or --within seconds), close,
repeat. Reported per kill: the first Welcome after the kill on an attempt *begun* after it, every
failed set-up (its code, message and how long it took), the dispatch gap of the acking sessions
on nodes 2 and 3 (from the kill to their first Dispatch after it). Every kill gets a fresh cluster
(``conveyord.sh down`` then ``cluster``): restarting node 1 alone within ~30 s of its kill made the
survivors' actor systems shut down when goakt's overdue NodeLeft fired (their /readyz still said
ok; every set-up then failed with ``actor system is not running``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._transport import TransportOptions, open_session
from conveyor_sdk.client import Client
from conveyor_sdk.errors import ConveyorError

SCRIPT = "/work/shared/tools/conveyord.sh"


@dataclass
class Attempt:
    node: int
    began: float
    ended: float
    outcome: str  # "welcome", "timeout", or the error / end


@dataclass
class Run:
    attempts: list[Attempt] = field(default_factory=list)
    dispatches: dict[int, list[float]] = field(default_factory=dict)  # acking session per node


def hello(queue: str) -> pb.WorkerMessage:
    return pb.WorkerMessage(hello=pb.Hello(queues={queue: 1}, concurrency=4, sdk_version="setup-probe/0"))


async def one_setup(url: str, queue: str, within: float) -> str:
    """One bare set-up: 'welcome', 'timeout' or how the stream ended."""
    try:
        stream = await asyncio.wait_for(open_session(url, TransportOptions(connect_timeout=2.0)), within)
    except (ConveyorError, TimeoutError) as exc:
        return f"connect: {exc}"
    try:
        await stream.send(hello(queue))
        async with asyncio.timeout(within):
            while True:
                msg = await stream.recv()
                if msg is None:
                    return "ended cleanly before Welcome"
                if msg.WhichOneof("frame") == "welcome":
                    return "welcome"
    except TimeoutError:
        return "timeout"
    except ConveyorError as exc:
        return f"{exc}"
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(stream.aclose(), 2)


async def prober(node: int, url: str, probe: Probe) -> None:
    """Bare set-ups in a loop (on a queue of their own: the Welcome alone is measured)."""
    while not probe.stop.is_set():
        began = time.monotonic()
        outcome = await one_setup(url, f"{probe.queue}-probe", probe.within)
        probe.run.attempts.append(Attempt(node, began, time.monotonic(), outcome))
        if outcome != "welcome":
            await asyncio.sleep(0.1)


async def first_task(node: int, url: str, probe: Probe, within: float = 2.0) -> None:
    """Fresh sessions on the backlogged queue until one gets a Dispatch within ``within`` s."""
    run, stop, queue = probe.run, probe.stop, probe.queue
    while not stop.is_set():
        began = time.monotonic()
        outcome = "no Dispatch"
        try:
            stream = await asyncio.wait_for(open_session(url, TransportOptions(connect_timeout=2.0)), 2.0)
        except (ConveyorError, TimeoutError) as exc:
            run.attempts.append(Attempt(node + 10, began, time.monotonic(), f"connect: {exc}"))
            await asyncio.sleep(0.1)
            continue
        try:
            await stream.send(hello(queue))
            welcomed = False
            async with asyncio.timeout(within):
                while True:
                    msg = await stream.recv()
                    if msg is None:
                        outcome = "ended"
                        break
                    kind = msg.WhichOneof("frame")
                    welcomed = welcomed or kind == "welcome"
                    if kind == "dispatch":
                        outcome = "dispatch"
                        res = pb.Result(task_id=msg.dispatch.task.id, outcome=pb.TASK_OUTCOME_SUCCESS)
                        await stream.send(pb.WorkerMessage(result=res))
                        break
            outcome = outcome if welcomed or outcome == "dispatch" else "no Welcome"
        except TimeoutError:
            outcome = "no Dispatch" if welcomed else "no Welcome"
        except ConveyorError as exc:
            outcome = str(exc)
        finally:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(stream.aclose(), 2)
        run.attempts.append(Attempt(node + 10, began, time.monotonic(), outcome))
        if outcome == "dispatch":
            return
        await asyncio.sleep(0.1)


async def acker(node: int, url: str, queue: str, run: Run, stop: asyncio.Event) -> None:
    """A bare worker session that answers every Dispatch SUCCESS and records when it came."""
    stamps = run.dispatches.setdefault(node, [])
    while not stop.is_set():
        try:
            stream = await open_session(url, TransportOptions(connect_timeout=2.0))
            await stream.send(hello(queue))
            while not stop.is_set():
                msg = await stream.recv()  # cancelled at the end of the run
                if msg is None:
                    break
                if msg.WhichOneof("frame") == "dispatch":
                    stamps.append(time.monotonic())
                    res = pb.Result(task_id=msg.dispatch.task.id, outcome=pb.TASK_OUTCOME_SUCCESS)
                    await stream.send(pb.WorkerMessage(result=res))
        except ConveyorError:
            await asyncio.sleep(0.05)


async def produce(urls: list[str], queue: str, rate: float, stop: asyncio.Event) -> None:
    async with Client(urls, timeout=5.0) as client:
        t = time.monotonic()
        while not stop.is_set():
            with contextlib.suppress(ConveyorError):
                await client.enqueue("probe", b"", queue=queue, retention=600)
            t += 1 / rate
            await asyncio.sleep(max(0.0, t - time.monotonic()))


async def all_welcome(urls: list[str], queue: str) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        outs = await asyncio.gather(*(one_setup(u, queue, 5.0) for u in urls))
        if all(o == "welcome" for o in outs):
            return
        await asyncio.sleep(0.5)
    raise SystemExit("the cluster did not welcome on every node within 120 s")


@dataclass
class Probe:
    """Where prober coroutines write; ``within``: a set-up's Welcome wait."""

    run: Run
    stop: asyncio.Event
    queue: str
    within: float


def since(t: float | None, killed: float) -> float | None:
    return None if t is None else t - killed


def first_end(attempts: list[Attempt], node: int, outcome: str, after: float) -> float | None:
    return min(
        (a.ended for a in attempts if a.node == node and a.outcome == outcome and a.began >= after),
        default=None,
    )


async def one_kill(args: argparse.Namespace, urls: list[str], k: int) -> dict[str, float | None]:
    """One kill -9 of node 1 under load; prints what happened, returns the summary row."""
    queue = f"probe{k}x{int(time.time())}"
    run, stop = Run(), asyncio.Event()
    probe = Probe(run, stop, queue, args.within)
    ackers = [asyncio.create_task(acker(n + 1, u, queue, run, stop)) for n, u in enumerate(urls)]
    tasks = [asyncio.create_task(produce(urls[1:], queue, args.rate, stop))]
    await asyncio.sleep(args.warmup)
    tasks += [asyncio.create_task(prober(n, urls[n - 1], probe)) for n in (2, 3) for _ in range(args.probes)]
    await asyncio.sleep(1.0)
    killed = time.monotonic()
    subprocess.run(["bash", SCRIPT, "kill", "1"], check=True, capture_output=True)  # noqa: ASYNC221  # the measured moment
    tasks += [asyncio.create_task(first_task(n, urls[n - 1], probe)) for n in (2, 3)]
    await asyncio.sleep(args.after)
    stop.set()
    for t in ackers:  # they wait in recv
        t.cancel()
    await asyncio.gather(*ackers, *tasks, return_exceptions=True)
    att = run.attempts
    welcome = {n: since(first_end(att, n, "welcome", killed), killed) for n in (2, 3)}
    fresh = {n: since(first_end(att, n + 10, "dispatch", killed), killed) for n in (2, 3)}
    held = {
        n: since(min((t for t in run.dispatches.get(n, []) if t >= killed), default=None), killed)
        for n in (2, 3)
    }
    print(
        f"kill {k + 1}: first Welcome to a set-up begun after the kill:"
        f" node2 {fmt(welcome[2])}, node3 {fmt(welcome[3])}"
    )
    for a in att:
        if a.node < 10 and a.ended >= killed and a.outcome != "welcome":
            print(
                f"    node{a.node} set-up at {a.began - killed:+.2f} s"
                f" failed after {a.ended - a.began:.2f} s: {a.outcome}"
            )
    ok = sorted(
        a.ended - a.began for a in att if a.node < 10 and a.began >= killed and a.outcome == "welcome"
    )
    if ok:
        print(
            f"    set-ups welcomed after the kill: {len(ok)},"
            f" median {statistics.median(ok):.3f} s, max {ok[-1]:.2f} s"
        )
    print(
        f"    first Dispatch to a fresh session (begun after the kill):"
        f" node2 {fmt(fresh[2])}, node3 {fmt(fresh[3])}"
    )
    for n in (2, 3):
        print(f"    node{n} fresh sessions: {dict(Counter(a.outcome for a in att if a.node == n + 10))}")
    print(
        f"    first Dispatch after the kill to the sessions open before it:"
        f" node2 {fmt(held[2])}, node3 {fmt(held[3])}"
    )
    return {"welcome": _min(welcome.values()), "fresh": _min(fresh.values()), "held": _min(held.values())}


def _min(values: Iterable[float | None]) -> float | None:
    return min((v for v in values if v is not None), default=None)


def fmt(v: float | None) -> str:
    return "never" if v is None else f"{v:.2f} s"


async def main(args: argparse.Namespace) -> None:
    base = int(os.environ.get("BASE", "29000"))
    urls = [f"http://127.0.0.1:{base + n * 10}" for n in (1, 2, 3)]
    rows = []
    for k in range(args.kills):
        subprocess.run(["bash", SCRIPT, "down"], check=True, capture_output=True)  # noqa: ASYNC221
        subprocess.run(["bash", SCRIPT, "cluster"], check=True, capture_output=True)  # noqa: ASYNC221
        await all_welcome(urls, f"ready{k}")
        rows.append(await one_kill(args, urls, k))
    subprocess.run(["bash", SCRIPT, "down"], check=True, capture_output=True)  # noqa: ASYNC221
    print("\n| kill | first Welcome, survivor | first task, fresh session | first task, open sessions |")
    print("|---|---|---|---|")
    for k, r in enumerate(rows, 1):
        print(f"| {k} | {fmt(r['welcome'])} | {fmt(r['fresh'])} | {fmt(r['held'])} |")
    print(f"('never': not within {args.after:g} s)")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--kills", type=int, default=5)
    p.add_argument("--probes", type=int, default=2, help="concurrent bare set-ups per surviving node")
    p.add_argument("--within", type=float, default=10.0, help="seconds a set-up may wait for its Welcome")
    p.add_argument("--rate", type=float, default=40.0)
    p.add_argument("--warmup", type=float, default=3.0)
    p.add_argument("--after", type=float, default=30.0)
    asyncio.run(main(p.parse_args()))
