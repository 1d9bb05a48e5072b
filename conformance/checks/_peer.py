"""Drive a worker program against a ScriptedPeer: the peer plays the server frame by frame."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from conveyor_conformance.checks._common import dur, ts
from conveyor_conformance.checks._procs import WorkerProcess, start_worker
from conveyor_conformance.context import CheckContext
from conveyor_conformance.model import CheckFailed
from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._gen.conveyor.v1 import task_pb2 as tpb

if TYPE_CHECKING:
    from conveyor_sdk.testing import ScriptedPeer

__all__ = ["Conversation", "Seen", "has_result", "open_conversation", "ready_conversation", "slots"]


@dataclass(slots=True)
class Seen:
    """Frames the worker sent, with arrival times (monotonic)."""

    frames: list[tuple[float, pb.WorkerMessage]] = field(default_factory=list)
    closed: bool = False

    def of(self, kind: str) -> list[tuple[float, pb.WorkerMessage]]:
        """Frames of one oneof kind."""
        return [(t, m) for t, m in self.frames if m.WhichOneof("frame") == kind]

    def results(self) -> dict[str, list[pb.Result]]:
        """Every Result (single or inside BatchResult) by task id."""
        out: dict[str, list[pb.Result]] = {}
        for _, m in self.frames:
            kind = m.WhichOneof("frame")
            items = (
                [m.result]
                if kind == "result"
                else list(m.batch_result.results)
                if kind == "batch_result"
                else []
            )
            for r in items:
                out.setdefault(r.task_id, []).append(r)
        return out


class Conversation:
    """One accepted session stream with a background reader collecting frames."""

    def __init__(self, ctx: CheckContext, peer: ScriptedPeer, proc: WorkerProcess) -> None:
        self.ctx = ctx
        self.peer = peer
        self.proc = proc
        self.sess: Any = None  # conveyor_sdk.testing.PeerSession once accepted
        self.hello: pb.Hello | None = None
        self.seen = Seen()
        self._reader: asyncio.Task[None] | None = None
        # What a server does on the client's half-close: answer it with a clean end. A check that
        # must keep dispatching after the half-close (§5.10) sets this False and ends the stream itself.
        self.end_on_half_close = True
        self.half_closed_at: float | None = None

    async def accept(self, within: float = 30.0) -> pb.Hello:
        """Accept the next stream and read its first frame (must be Hello)."""
        try:
            self.sess = await self.peer.accept(timeout=within)
        except TimeoutError:
            raise CheckFailed(
                f"the worker opened no session within {within:g}s; {self.proc.tail()}"
            ) from None
        first = await self.sess.recv(timeout=within)
        if first is None or first.WhichOneof("frame") != "hello":
            kind = None if first is None else first.WhichOneof("frame")
            raise CheckFailed(f"first frame was {kind}, not Hello")
        self.hello = first.hello
        return first.hello

    async def welcome(self, *, heartbeat: float = 0.3, lease: float = 60.0) -> None:
        """Send Welcome and start collecting frames."""
        w = pb.Welcome(
            session_id="01J0CONFORMANCE0PEER000000",
            lease_ttl=dur(lease),
            heartbeat_interval=dur(heartbeat),
            server_version="v0.0.0-conformance",
            min_sdk_version="v0.0.0-0",
        )
        await self.send(pb.ServerMessage(welcome=w))
        await self._stop_reader()  # a reconnect replaces the previous stream's reader
        self._reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        sess: Any = self.sess
        while True:
            msg = await sess.recv(timeout=3600)
            if msg is None:
                self.seen.closed = True
                self.half_closed_at = time.monotonic()
                if sess.client_half_closed and self.end_on_half_close:
                    await sess.end()  # as a server does: a clean end answers the half-close
                return
            self.seen.frames.append((time.monotonic(), msg))

    async def shutdown(self) -> None:
        """Stop the program first (the reader answers its half-close), then the reader and the peer."""
        if self._reader is None and self.sess is not None:
            self._reader = asyncio.ensure_future(self._read())  # answer a half-close before Welcome too
        await self.proc.aclose()
        await self._stop_reader()
        await self.peer.aclose()

    async def _stop_reader(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)

    async def end_quietly(self) -> None:
        """End the stream cleanly if it is still open (the client may have reset it meanwhile)."""
        with contextlib.suppress(Exception):  # h2 StreamClosedError after a client reset
            await self.sess.end()

    async def send(self, msg: pb.ServerMessage) -> None:
        """Send one server frame."""
        await self.sess.send(msg)

    async def dispatch(
        self,
        task_id: str,
        type_: str = "conformance:task",
        *,
        deadline_in: float = 60.0,
        payload: bytes = b'{"n":1}',
        content_type: str = "application/json",
        options: tpb.TaskOptions | None = None,
    ) -> None:
        """Send a Dispatch for one task (``options`` as a server would echo them)."""
        env = tpb.TaskEnvelope(
            id=task_id,
            queue=self.ctx.queue,
            type=type_,
            payload=payload,
            content_type=content_type,
            retried=0,
        )
        if options is not None:
            env.options.CopyFrom(options)
        await self.send(
            pb.ServerMessage(dispatch=pb.Dispatch(task=env, deadline=ts(time.time() + deadline_in)))
        )

    async def batch(
        self, ids: list[str], type_: str = "conformance:batch", deadline_in: float = 60.0
    ) -> None:
        """Send a BatchDispatch of ``ids`` in group 'g'."""
        tasks = [
            tpb.TaskEnvelope(
                id=i, queue=self.ctx.queue, type=type_, payload=b'{"n":1}', content_type="application/json"
            )
            for i in ids
        ]
        bd = pb.BatchDispatch(tasks=tasks, deadline=ts(time.time() + deadline_in), group="g")
        await self.send(pb.ServerMessage(batch_dispatch=bd))

    async def until_opened(self, n: int, within: float = 30.0) -> None:
        """Wait until the program opened ``n`` session streams in all (accepted or rejected)."""
        loop = asyncio.get_running_loop()
        end = loop.time() + self.ctx.t(within)
        while self.peer.sessions_opened < n:
            if loop.time() > end:
                raise CheckFailed(f"the worker opened no session within {within:g}s; {self.proc.tail(3)}")
            await asyncio.sleep(0.02)

    async def until(self, pred: Callable[[Seen], bool], what: str, within: float = 10.0) -> None:
        """Wait until ``pred(seen)``; CheckFailed naming ``what`` otherwise."""
        loop = asyncio.get_running_loop()
        end = loop.time() + self.ctx.t(within)
        while not pred(self.seen):
            if loop.time() > end:
                kinds = [m.WhichOneof("frame") for _, m in self.seen.frames]
                raise CheckFailed(
                    f"no {what} within {within:g}s; worker sent {kinds[-12:]}; {self.proc.tail(3)}"
                )
            await asyncio.sleep(0.02)


async def open_conversation(
    ctx: CheckContext,
    *,
    sleep_ms: int = 0,
    concurrency: int = 2,
    extra: dict[str, str] | None = None,
    require_token: str | None = None,
) -> Conversation:
    """Start a ScriptedPeer (answering in the program's own protocol) and the program pointed at it."""
    from conveyor_sdk.testing import ScriptedPeer

    peer = ScriptedPeer(require_token=require_token)
    await peer.__aenter__()
    ctx.on_close(peer.aclose)
    env = {"CONCURRENCY": str(concurrency), **(extra or {})}
    proc = await start_worker(ctx, addr=peer.url, sleep_ms=sleep_ms, extra=env)
    conv = Conversation(ctx, peer, proc)
    ctx.on_close(conv.shutdown)
    return conv


async def ready_conversation(
    ctx: CheckContext, *, sleep_ms: int = 0, concurrency: int = 2, extra: dict[str, str] | None = None
) -> Conversation:
    """A worker program that said Hello and got a Welcome (heartbeat_interval 0.3 s)."""
    conv = await open_conversation(ctx, sleep_ms=sleep_ms, concurrency=concurrency, extra=extra)
    await conv.accept()
    await conv.welcome(heartbeat=0.3)
    return conv


def slots(conv: Conversation, want: int) -> int:
    """How many tasks a check may have in flight: ``want``, capped by the Hello's concurrency."""
    declared = conv.hello.concurrency if conv.hello is not None else 1
    return max(1, min(want, declared))


def has_result(task_id: str, n: int = 1) -> Callable[[Seen], bool]:
    """Predicate: at least ``n`` Results for ``task_id`` were seen."""
    return lambda seen: len(seen.results().get(task_id, [])) >= n
