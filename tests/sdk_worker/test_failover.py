"""Several server addresses: the worker moves to the next one at once, backoff per full round."""

from __future__ import annotations

import asyncio
import logging
import socket
import time

import pytest

from conveyor_sdk._protocol.backoff import SETUP_FREE_ROUNDS, Backoff, SettingError, parse_addresses
from conveyor_sdk.client import Client
from conveyor_sdk.errors import Code
from conveyor_sdk.testing import ScriptedPeer
from conveyor_sdk.types import TaskState
from conveyor_sdk.worker import Registry, TaskContext, TaskData, Worker
from conveyor_server_min.testing import ServerProcess
from tests._util import eventually
from tests.conftest import FAST_ARGS
from tests.sdk_worker._helpers import KEEP, running, wait_state


def dead_url() -> str:
    """A loopback URL nobody listens on (a port the OS gave us, then released): connect is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def test_backoff_waits_only_after_a_full_round() -> None:
    """With three addresses two failures cost 0 s; the third draws §5.9's delay; Welcome resets."""
    b = Backoff(rng=lambda: 0.999999, addresses=("a", "b", "c"))
    assert [b.address, b.next_delay(), b.address, b.next_delay(), b.address] == ["a", 0.0, "b", 0.0, "c"]
    assert round(b.next_delay(), 2) == 0.5 and b.address == "a"
    assert [b.next_delay(), b.next_delay(), round(b.next_delay(), 2)] == [0.0, 0.0, 1.0]
    b.reset()
    assert b.failures == 0 and b.next_delay() == 0.0 and b.address == "b"  # moves on, no wait
    single = Backoff(rng=lambda: 0.999999)
    assert [round(single.next_delay(), 2) for _ in range(3)] == [0.5, 1.0, 2.0]  # one address: as before


def test_backoff_counts_from_the_start_of_the_round() -> None:
    """A round whose set-ups took 1.2 s sleeps only what is left of its draw (none of 0.5 s, 0.9 of 1 s)."""
    b = Backoff(rng=lambda: 0.999999, addresses=("a", "b"))
    b.began(0.0)
    assert b.next_delay(1.0) == 0.0  # a -> b, within the round
    b.began(1.0)  # not the round's start
    assert b.next_delay(1.2) == 0.0  # drew 0.5 s, the round already took 1.2 s
    b.began(1.2)
    b.next_delay(1.25)
    b.began(1.25)
    assert round(b.next_delay(1.3), 2) == 0.9  # drew 1 s, the round took 0.1 s
    assert round(b.next_delay(), 2) == 0.0 and round(b.next_delay(), 2) == 2.0  # no clock given: the draw


def test_rounds_with_a_setup_failure_are_free_for_a_bounded_number() -> None:
    """A round where a node was reached but did not welcome costs no wait, SETUP_FREE_ROUNDS times."""
    b = Backoff(rng=lambda: 0.999999, addresses=("dead", "rehoming"))
    for _ in range(SETUP_FREE_ROUNDS):
        assert [b.next_delay(), b.next_delay(setup_failed=True)] == [0.0, 0.0]  # refused, set-up failed
    assert b.next_delay() == 0.0 and round(b.next_delay(setup_failed=True), 2) == 0.5  # bound: §5.9 again
    assert round(b.next_delay() + b.next_delay(), 2) == 1.0  # refusals only: never free
    b.reset()  # a Welcome gives the free rounds back
    assert [b.next_delay(setup_failed=True), b.next_delay()] == [0.0, 0.0]
    single = Backoff(rng=lambda: 0.999999)
    assert round(single.next_delay(setup_failed=True), 2) == 0.5  # one address: plain §5.9


def test_nodes_that_fail_setup_are_retried_without_a_backoff() -> None:
    """Two nodes answering ``internal: session setup failed`` (conveyord re-homing a killed node's
    sessions), reconnect base 10 s: the worker tries them again at once, round after round."""

    async def refuse(peer: ScriptedPeer, seen: list[float]) -> None:
        while True:
            session = await peer.accept(timeout=30)
            await session.recv()  # the Hello
            seen.append(time.monotonic())
            await session.end(Code.INTERNAL, "session setup failed")

    async def main() -> None:
        seen: list[float] = []
        async with ScriptedPeer() as a, ScriptedPeer() as b:
            loops = [asyncio.create_task(refuse(p, seen)) for p in (a, b)]
            worker = Worker([a.url, b.url], reconnect_base=10.0, reconnect_max=10.0)
            run = asyncio.create_task(worker.run(Registry()))
            t0 = time.monotonic()
            await eventually(lambda: _at_least(seen, 2 * SETUP_FREE_ROUNDS), timeout=5, what="set-ups")
            took = time.monotonic() - t0
            worker.stop(immediate=True)
            await asyncio.wait_for(run, 10)
            for loop in loops:
                loop.cancel()
        assert took < 3.0, (
            f"{2 * SETUP_FREE_ROUNDS} set-ups took {took:.2f}s"
        )  # a 0-10 s draw per round without

    asyncio.run(main())


async def _at_least(seen: list[float], n: int) -> bool:
    return len(seen) >= n


def test_setup_timeout_defaults_by_address_count() -> None:
    """One address waits 30 s for its Welcome, several 2 s each; a bad value is a ValueError."""
    assert Worker("http://a:1").setup_timeout == 30.0
    assert Worker("http://a:1,http://b:1").setup_timeout == 2.0
    assert Worker("http://a:1", setup_timeout=5).setup_timeout == 5.0
    for bad in (0, -1, float("inf"), True, "3"):
        with pytest.raises(ValueError, match="setup_timeout"):
            Worker("http://a:1", setup_timeout=bad)  # type: ignore[arg-type]


def test_a_node_that_never_welcomes_costs_one_setup_timeout(server_url: str) -> None:
    """Given [silent, live] (the silent one takes the Hello, never answers): a task runs within ~2 s."""
    done: list[float] = []

    async def main() -> None:
        async with ScriptedPeer() as silent:
            worker = Worker([silent.url, server_url], reconnect_base=10.0, reconnect_max=10.0)
            async with Client(server_url) as client, running(worker, _registry(done)):
                t0 = time.monotonic()
                info = await client.enqueue("t", b"", **KEEP)
                await wait_state(client, info.id, TaskState.COMPLETED, timeout=8.0)
                took = time.monotonic() - t0
                assert took < 5.0, f"the task waited {took:.2f}s"  # 30 s (the one-address bound) without it
                assert silent.sessions_opened == 1 and worker.server == server_url

    asyncio.run(main())


def test_addresses_are_validated_with_a_typed_error() -> None:
    """Comma strings and lists parse; an empty entry or a non-URL names the entry."""
    assert parse_addresses("http://a:1, http://b:2/") == ("http://a:1", "http://b:2")
    assert parse_addresses(["http://a:1"]) == ("http://a:1",)
    for bad, match in [("", "empty"), ("http://a:1,,http://b:2", "#2"), ("a:1", "http://"), ([], "empty")]:
        with pytest.raises(SettingError, match=match):
            parse_addresses(bad)
    with pytest.raises(ValueError, match="reconnect max"):
        Worker("http://a:1", reconnect_base=2.0, reconnect_max=1.0)
    with pytest.raises(ValueError, match="reconnect base"):
        Worker("http://a:1", reconnect_base=0)
    with pytest.raises(ValueError, match="#2"):
        Worker("http://a:1,")


def _registry(done: list[float]) -> Registry:
    reg = Registry()

    @reg.handler("t")
    async def t(task: TaskData, ctx: TaskContext) -> None:
        done.append(time.monotonic())

    return reg


def test_worker_skips_a_dead_address_at_once(server_url: str) -> None:
    """Given [dead, live], the worker runs a task well within the first backoff step."""
    done: list[float] = []

    async def main() -> None:
        worker = Worker([dead_url(), server_url], reconnect_base=5.0, reconnect_max=5.0)
        async with Client(server_url) as client, running(worker, _registry(done)):
            t0 = time.monotonic()
            info = await client.enqueue("t", b"", **KEEP)
            await wait_state(client, info.id, TaskState.COMPLETED, timeout=4.0)
            assert time.monotonic() - t0 < 4.0 and worker.server == server_url  # no 5 s wait drawn
            assert worker.statistics()["servers"][1] == server_url

    asyncio.run(main())


def test_worker_moves_to_the_other_server_when_its_server_stops() -> None:
    """Its server is killed: the worker runs the next task on the other well under 2 s later."""
    done: list[float] = []
    with ServerProcess(FAST_ARGS) as a, ServerProcess(FAST_ARGS) as b:

        async def main() -> None:
            # A large backoff base: only moving on at once (not a backoff draw) can meet the bound.
            worker = Worker([a.url, b.url], reconnect_base=10.0, reconnect_max=10.0)
            async with Client(a.url) as ca, Client(b.url) as cb, running(worker, _registry(done)):
                await wait_state(ca, (await ca.enqueue("t", b"", **KEEP)).id, TaskState.COMPLETED)
                first = await cb.enqueue("t", b"", **KEEP)  # waits on b: nobody is connected there
                killed = time.monotonic()
                a.kill()
                await wait_state(cb, first.id, TaskState.COMPLETED, timeout=8.0)
                gap = done[-1] - killed
                assert gap < 2.0, f"idle {gap:.2f}s after the kill"
                assert worker.server == b.url and worker.statistics()["reconnects"] >= 1

        asyncio.run(main())


def test_a_task_running_when_the_session_is_lost_is_logged_as_abandoned(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Its server dies mid-task: the line says the task was abandoned, not a retry count it cannot know."""
    reg = Registry()
    started = asyncio.Event()

    @reg.handler("slow")
    async def slow(task: TaskData, ctx: TaskContext) -> None:
        started.set()
        await asyncio.sleep(3600)

    with ServerProcess(FAST_ARGS) as a:

        async def main() -> None:
            worker = Worker(a.url, reconnect_base=10.0, reconnect_max=10.0)
            async with Client(a.url) as client, running(worker, reg):
                task = await client.enqueue("slow", b"", **KEEP)
                await asyncio.wait_for(started.wait(), 10)
                a.kill()
                await eventually(lambda: _said(caplog, f"task {task.id} (slow) abandoned"), 10)
            assert not [r for r in caplog.records if task.id in r.getMessage() and "retry" in r.getMessage()]

        with caplog.at_level(logging.WARNING, logger="conveyor.worker"):
            asyncio.run(main())


async def _said(caplog: pytest.LogCaptureFixture, text: str) -> bool:
    return any(text in r.getMessage() for r in caplog.records)
