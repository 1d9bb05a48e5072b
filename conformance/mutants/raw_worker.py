"""A compact worker on raw session frames, faithful by default, broken on request.

Same environment contract and declared extensions as ``conveyor conformance worker``
(CONVEYOR_ADDR, CONVEYOR_TOKEN, QUEUE, SLEEP_MS, SCENARIO, CONCURRENCY; CONVEYOR_PROTOCOL
``grpc`` or ``connect`` for the session) plus ``MUTATION``:

none                       faithful reference implementation
no-heartbeat               never sends Heartbeat
no-heartbeat-during-drain  stops heartbeating once SIGTERM arrives
partial-heartbeat          lists only the first in-flight id in each Heartbeat
per-member-results         answers a BatchDispatch with one Result frame per member
retry-on-drain             reports RETRY for tasks abandoned by a drain
no-close-on-shutdown       exits on SIGTERM without half-closing (and without results)
ignore-deadline            never cancels a handler at Dispatch.deadline
cancel-at-lease-deadline   cancels every handler at Dispatch.deadline, lease part included (RETRY)
ignore-cancel              ignores Cancel frames
exception-as-success       reports SUCCESS for a raising handler
serial                     runs one task at a time whatever the concurrency
sends-credit               sends a Credit frame after every Result
crash-on-ping              treats Ping as a protocol error and exits
reconnect-no-jitter        reconnects after exactly the backoff ceiling
jitter-ceiling-doubled     full jitter, but the ceiling doubles once too often (0.5 s * 2^(n+1))
group-key-heartbeat        lists a batch's group key in Heartbeats instead of its member ids
drop-late-dispatch         drops a Dispatch arriving while draining (neither heartbeated nor started)
no-handlers                declares every extension but handles only conformance:task / :batch
no-reset-backoff           never resets the reconnect counter after Welcome (no jitter either)
reconnect-on-fatal         reconnects after unauthenticated / invalid_argument
start-late-dispatch        runs a Dispatch that arrives while draining
accept-bad-hello           SCENARIO=bad-hello exits 2 (accepts a zero weight)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import sys
import time
from collections.abc import Mapping
from typing import Any

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._transport import TransportOptions, open_session
from conveyor_sdk.errors import Code, ConveyorError

__all__ = ["RawWorker", "main"]

FATAL = {Code.UNAUTHENTICATED, Code.PERMISSION_DENIED, Code.INVALID_ARGUMENT}
SUCCESS, RETRY, SKIP, RELEASED = 1, 2, 3, 4
DECLARATION = (
    "conveyor-conformance: supports CONCURRENCY CONVEYOR_TOKEN DRAIN_GRACE_S "
    "conformance:cancellable conformance:fail conformance:skip conformance:json"
)
UNCANCELLABLE = ("conformance:task", "conformance:batch")  # they ignore cancellation (upstream contract)


class RawWorker:
    """One worker process: sessions with reconnect, a job per dispatch, drain on SIGTERM."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.url = env["CONVEYOR_ADDR"]
        self.token = env.get("CONVEYOR_TOKEN") or None
        self.queue = env.get("QUEUE", "default")
        self.sleep = int(env.get("SLEEP_MS", "0")) / 1000
        self.concurrency = int(env.get("CONCURRENCY", "4"))
        self.grace = float(env.get("DRAIN_GRACE_S", "4"))
        self.mutation = env.get("MUTATION", "none")
        self.protocol: Any = "connect" if env.get("CONVEYOR_PROTOCOL") == "connect" else "grpc"
        self.stopping = asyncio.Event()
        self.slots = asyncio.Semaphore(1 if self.mutation == "serial" else self.concurrency)
        self.jobs: dict[str, asyncio.Task[None]] = {}
        self.kinds: dict[str, str] = {}
        self.groups: dict[str, str] = {}
        self.inflight: list[str] = []
        self.sess: Any = None
        self.draining = False
        self.lease_ttl = 60.0
        self.serving = False

    async def run(self) -> int:
        """Serve until SIGTERM (exit 0) or a fatal error (exit 3)."""
        loop = asyncio.get_running_loop()
        main = asyncio.current_task()
        assert main is not None

        def on_term() -> None:
            self.stopping.set()
            if not self.serving:  # connecting or waiting for Welcome: nothing to drain
                main.cancel()

        loop.add_signal_handler(signal.SIGTERM, on_term)
        try:
            return await self._loop()
        except asyncio.CancelledError:
            return 0

    async def _loop(self) -> int:
        failures = 0
        while not self.stopping.is_set():
            err = await self._session_once()
            if err == "welcomed" and self.mutation != "no-reset-backoff":
                failures = 0
            if isinstance(err, ConveyorError) and err.code in FATAL and self.mutation != "reconnect-on-fatal":
                return 3
            if self.stopping.is_set():
                break
            doubled = 1 if self.mutation == "jitter-ceiling-doubled" else 0
            ceiling = min(30.0, 0.5 * 2 ** (failures + doubled))
            exact = self.mutation in ("reconnect-no-jitter", "no-reset-backoff")
            delay = ceiling if exact else random.uniform(0, ceiling)
            failures += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), delay)
        return 0

    async def _session_once(self) -> Any:
        welcomed = False
        try:
            options = TransportOptions(token=self.token, protocol=self.protocol)
            self.sess = await open_session(self.url, options)
            hello = pb.Hello(
                queues={self.queue: 1},
                concurrency=self.concurrency,
                sdk_version="conveyor-conformance-raw/0.1.0",
                batch_types=["conformance:batch"],
            )
            await self.sess.send(pb.WorkerMessage(hello=hello))
            first = await self.sess.recv()
            if first is None or first.WhichOneof("frame") != "welcome":
                return None
            welcomed = True
            self.lease_ttl = first.welcome.lease_ttl.ToNanoseconds() / 1e9
            await self._serve(first.welcome.heartbeat_interval.ToNanoseconds() / 1e9)
            return "welcomed"
        except ConveyorError as exc:
            return "welcomed" if welcomed and exc.code not in FATAL else exc
        finally:
            if self.sess is not None:
                await self.sess.aclose()

    async def _serve(self, interval: float) -> None:
        self.serving = True
        beat = asyncio.ensure_future(self._heartbeats(interval))
        reader = asyncio.ensure_future(self._read())
        stop = asyncio.ensure_future(self.stopping.wait())
        try:
            await asyncio.wait({reader, stop}, return_when=asyncio.FIRST_COMPLETED)
            if stop.done() and not reader.done():
                await self._drain(reader)
            else:
                reader.result()
        finally:
            for t in (beat, reader, stop, *self.jobs.values()):
                t.cancel()
            await asyncio.gather(beat, reader, stop, *self.jobs.values(), return_exceptions=True)
            self.jobs.clear()
            self.inflight.clear()
            self.serving = False

    async def _drain(self, reader: asyncio.Task[None]) -> None:
        self.draining = True
        if self.mutation == "no-close-on-shutdown":
            os._exit(0)
        jobs = list(self.jobs.values())
        if jobs:
            await asyncio.wait(jobs, timeout=self.grace)
        for task_id, job in list(self.jobs.items()):
            job.cancel()
            outcome = RETRY if self.mutation == "retry-on-drain" else RELEASED
            await self._result(task_id, outcome, "worker draining")
        for task_id in list(self.inflight):  # late dispatches never started
            await self._result(task_id, RELEASED, "worker draining")
        await self.sess.close_send()
        with contextlib.suppress(asyncio.TimeoutError, ConveyorError):
            await asyncio.wait_for(reader, 10)

    async def _read(self) -> None:
        while (msg := await self.sess.recv()) is not None:
            kind = msg.WhichOneof("frame")
            if kind == "dispatch":
                self._start([msg.dispatch.task], msg.dispatch.deadline, batch=False)
            elif kind == "batch_dispatch":
                bd = msg.batch_dispatch
                self._start(list(bd.tasks), bd.deadline, batch=True, group=bd.group)
            elif kind == "cancel" and self.mutation != "ignore-cancel":
                job = self.jobs.get(msg.cancel.task_id)
                if job is not None and self.kinds.get(msg.cancel.task_id) not in UNCANCELLABLE:
                    job.cancel()
            elif kind == "ping" and self.mutation == "crash-on-ping":
                raise ConveyorError("unexpected Ping")

    def _start(self, tasks: list[Any], deadline: Any, *, batch: bool, group: str = "") -> None:
        ids = [t.id for t in tasks]
        if self.draining and self.mutation == "drop-late-dispatch":
            return
        if batch and self.mutation == "group-key-heartbeat":
            self.inflight.append(group)
            self.groups[ids[0]] = group
        else:
            self.inflight.extend(ids)
        if self.draining and self.mutation != "start-late-dispatch":
            return  # late dispatch: heartbeat it, never start it
        self.kinds[ids[0]] = tasks[0].type
        limit = deadline.ToNanoseconds() / 1e9 if deadline.ByteSize() else None
        if self.mutation != "cancel-at-lease-deadline":
            if limit is not None and limit >= time.time() + self.lease_ttl - 0.5:
                limit = None  # the lease part of the deadline: heartbeats extend it
            if tasks[0].type in UNCANCELLABLE:
                limit = None
        job = asyncio.ensure_future(self._job(tasks, limit, batch))
        self.jobs[ids[0]] = job

    async def _job(self, tasks: list[Any], deadline: float | None, batch: bool) -> None:
        async with self.slots:
            try:
                outcomes = await self._execute(tasks, deadline)
            except asyncio.CancelledError:
                if self.draining:
                    raise
                outcomes = [(RETRY, "canceled", b"")] * len(tasks)
            await self._report(tasks, outcomes, batch)
            self.jobs.pop(tasks[0].id, None)

    async def _execute(self, tasks: list[Any], deadline: float | None) -> list[tuple[int, str, bytes]]:
        kind = tasks[0].type
        budget = None
        if deadline is not None and self.mutation != "ignore-deadline":
            budget = max(0.0, deadline - time.time())
        try:
            return await asyncio.wait_for(self._handle(kind, tasks), budget)
        except TimeoutError:
            return [(RETRY, "deadline exceeded", b"")] * len(tasks)

    async def _handle(self, kind: str, tasks: list[Any]) -> list[tuple[int, str, bytes]]:  # noqa: PLR0911
        if kind in (*UNCANCELLABLE, "conformance:cancellable"):
            await asyncio.sleep(self.sleep)
            return [(SUCCESS, "", b"")] * len(tasks)
        if self.mutation == "no-handlers":
            return [(RETRY, f"no handler registered for {kind!r}", b"")] * len(tasks)
        if kind == "conformance:fail":
            outcome = SUCCESS if self.mutation == "exception-as-success" else RETRY
            return [(outcome, f"handler raised {_marker(tasks[0].payload)}", b"")]
        if kind == "conformance:skip":
            return [(SKIP, "permanent failure", b"")]
        if kind == "conformance:json":
            task = tasks[0]
            if task.content_type not in ("", "application/json"):
                return [(SKIP, f"no codec for content_type {task.content_type!r}", b"")]
            value = json.loads(task.payload)
            return [(SUCCESS, "", json.dumps(value, separators=(",", ":")).encode())]
        return [(SKIP, f"no handler for {kind!r}", b"")]

    async def _report(self, tasks: list[Any], outcomes: list[tuple[int, str, bytes]], batch: bool) -> None:
        results = [
            pb.Result(task_id=t.id, outcome=o, error_msg=e, result=r)  # type: ignore[arg-type]
            for t, (o, e, r) in zip(tasks, outcomes, strict=True)
        ]
        for key in [t.id for t in tasks] + [self.groups.pop(tasks[0].id, "")]:
            with contextlib.suppress(ValueError):
                self.inflight.remove(key)
        if batch and self.mutation != "per-member-results":
            await self.sess.send(pb.WorkerMessage(batch_result=pb.BatchResult(results=results)))
        else:
            for res in results:
                await self.sess.send(pb.WorkerMessage(result=res))
        if self.mutation == "sends-credit":
            await self.sess.send(pb.WorkerMessage(credit=pb.Credit(n=1)))

    async def _result(self, task_id: str, outcome: int, msg: str) -> None:
        with contextlib.suppress(ValueError):
            self.inflight.remove(task_id)
        res = pb.Result(task_id=task_id, outcome=outcome, error_msg=msg)  # type: ignore[arg-type]
        await self.sess.send(pb.WorkerMessage(result=res))

    async def _heartbeats(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            if self.mutation == "no-heartbeat" or (
                self.draining and self.mutation == "no-heartbeat-during-drain"
            ):
                continue
            ids = list(self.inflight)
            if self.mutation == "partial-heartbeat":
                ids = ids[:1]
            if ids:
                await self.sess.send(pb.WorkerMessage(heartbeat=pb.Heartbeat(active_task_ids=ids)))


def _marker(payload: bytes) -> str:
    try:
        value = json.loads(payload or b"{}")
    except ValueError:
        return ""
    return str(value.get("marker", "")) if isinstance(value, dict) else ""


def main(env: Mapping[str, str] | None = None) -> int:
    """Entry point; returns the exit code."""
    env = os.environ if env is None else env
    if env.get("SCENARIO", "sleep") == "bad-hello":
        return 2 if env.get("MUTATION") == "accept-bad-hello" else 1
    print(DECLARATION, flush=True)
    return asyncio.run(RawWorker(env).run())


if __name__ == "__main__":
    sys.exit(main())
