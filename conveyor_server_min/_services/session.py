"""WorkerService.Session: the server side of the bidirectional worker stream.

One handler call per stream. After a valid Hello it queues Welcome, registers
the session with the engine and runs three tasks: a reader applying frames, a
writer draining the session's outbox through ``send``, and a stop waiter used
by server shutdown. Whatever ends the stream (EOF, error, cancellation,
shutdown) the engine releases the session's leased tasks with no retry charge.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk.errors import ConveyorError, Internal, ProtocolError, Unavailable
from conveyor_server_min._engine.engine import Engine
from conveyor_server_min._engine.model import Outcome
from conveyor_server_min._engine.sessions import Action, BatchAction, CancelAction, CloseAction, SessionState
from conveyor_server_min._services.bounds import truncate
from conveyor_server_min._services.convert import fill_envelope, set_timestamp
from conveyor_server_min._services.hello import check_hello, welcome
from conveyor_server_min.service_api import CallContext

__all__ = ["SessionHandler", "server_message"]

log = logging.getLogger("conveyor.server.session")
UNDELIVERABLE = "server could not encode the task for dispatch"
Send = Callable[[pb.ServerMessage], Awaitable[None]]
SendNowait = Callable[[pb.ServerMessage, bool], bool]
Gate = Callable[[], Awaitable[None]]


def server_message(action: Action) -> pb.ServerMessage:
    """Encode an engine action as a ServerMessage (at the moment it is produced)."""
    msg = pb.ServerMessage()
    if isinstance(action, CloseAction):
        raise TypeError("CloseAction ends the stream; it is not a frame")
    if isinstance(action, CancelAction):
        msg.cancel.task_id = action.task_id
    elif isinstance(action, BatchAction):
        batch = msg.batch_dispatch
        for task in action.tasks:
            fill_envelope(batch.tasks.add(), task)
        set_timestamp(batch.deadline, action.deadline)
        batch.group = action.group
    else:
        dispatch = msg.dispatch
        fill_envelope(dispatch.task, action.task)
        set_timestamp(dispatch.deadline, action.deadline)
    return msg


class Outbox:
    """FIFO of frames for one stream, drained by the writer task.

    With ``send_nowait`` a frame pushed while nothing is queued goes to the stream at
    once (no hop through the writer task). Frames queue here only while the stream's
    buffer is above its high-water mark, which keeps their order.

    Latency versus batching: a frame caused by this session's own traffic (a Result
    freeing a slot, handled while ``own_turn`` is set) joins the turn's batched flush;
    any other frame (a Dispatch decided while an Enqueue is handled, a timer, an admin
    call) is written to the socket in the same turn, before that request's reply.

    With a ``gate`` (the durable store's commit wait), frames are sent only after every
    change made before they were queued is committed: a worker never receives a lease
    the store does not hold. A gate therefore turns the immediate path off.
    """

    def __init__(self, send_nowait: SendNowait | None = None, gate: Gate | None = None) -> None:
        self._items: deque[pb.ServerMessage] = deque()
        self._ready = asyncio.Event()
        self._send_nowait = send_nowait if gate is None else None
        self._gate = gate
        self.own_turn = False

    def push(self, msg: pb.ServerMessage) -> None:
        send_nowait = self._send_nowait
        if not self._items and send_nowait is not None and send_nowait(msg, not self.own_turn):
            return
        self._items.append(msg)
        self._ready.set()

    async def drain(self, send: Send) -> None:
        while True:
            await self._ready.wait()
            self._ready.clear()
            while self._items:
                count = len(self._items)
                if self._gate is not None:
                    await self._gate()
                for _ in range(count):
                    await send(self._items.popleft())


def _check_result(result: pb.Result) -> None:
    if not result.task_id:
        raise ProtocolError("protocol violation: Result without task_id")
    if not 0 <= result.outcome <= 4:
        raise ProtocolError(f"protocol violation: undefined task outcome {result.outcome}")


class SessionHandler:
    """The ``ServiceSet.session`` callable."""

    def __init__(self, engine: Engine, gate: Gate | None = None) -> None:
        self.engine = engine
        self.gate = gate
        self.closing = False
        self._live: dict[str, asyncio.Event] = {}
        self._idle = asyncio.Event()
        self._idle.set()

    def __repr__(self) -> str:
        return f"SessionHandler(live={len(self._live)}, closing={self.closing})"

    async def __call__(
        self,
        ctx: CallContext,
        recv: AsyncIterator[pb.WorkerMessage],
        send: Send,
        *,
        send_nowait: SendNowait | None = None,
    ) -> None:
        frames = aiter(recv)
        first = await anext(frames, None)
        if first is None:
            return
        hello = check_hello(first, self.engine.config)
        if self.closing:
            raise Unavailable("node is shutting down; reconnect to another node")
        outbox = Outbox(send_nowait, self.gate)
        holder: list[SessionState] = []
        closed: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        session = self.engine.open_session(
            queues=dict(hello.queues),
            concurrency=hello.concurrency,
            sink=lambda action: self._deliver(holder[0], outbox, action, closed),
            sdk_version=hello.sdk_version,
            labels=dict(hello.labels),
            batch_types=list(hello.batch_types),
        )
        holder.append(session)
        outbox.push(welcome(session.id, self.engine.config))
        stop = asyncio.Event()
        self._live[session.id] = stop
        self._idle.clear()
        log.debug("session %s opened from %s: %r", session.id, ctx.peer, session)
        try:
            self.engine.start_session(session)
            await self._run(session, frames, outbox, send, stop, closed=closed)
        finally:
            self.engine.close_session(session)
            self._live.pop(session.id, None)
            if not self._live:
                self._idle.set()
            log.debug("session %s closed", session.id)

    def _deliver(
        self, session: SessionState, outbox: Outbox, action: Action, closed: asyncio.Future[str]
    ) -> None:
        """Encode ``action`` into the outbox. A task that cannot be encoded is archived (on the next
        loop turn, outside the dispatcher) instead of ending the session or stalling other tasks.
        A :class:`CloseAction` (the engine closed a silent session) ends the stream instead."""
        if isinstance(action, CloseAction):
            if not closed.done():
                closed.set_result(action.reason)
            return
        try:
            msg = server_message(action)
        except Exception:  # isolation point: one bad row must not take the worker's session down
            if isinstance(action, CancelAction):
                raise
            tasks = action.tasks if isinstance(action, BatchAction) else (action.task,)
            ids = [t.id for t in tasks]
            log.exception("cannot encode %s for session %s; archiving them", ids, session.id)
            asyncio.get_running_loop().call_soon(self._undeliverable, session, ids)
            return
        outbox.push(msg)

    def _undeliverable(self, session: SessionState, task_ids: list[str]) -> None:
        reports = [(task_id, Outcome.SKIP_RETRY, UNDELIVERABLE, b"") for task_id in task_ids]
        self.engine.batch_result(session, reports)

    async def _run(
        self,
        session: SessionState,
        frames: AsyncIterator[pb.WorkerMessage],
        outbox: Outbox,
        send: Send,
        stop: asyncio.Event,
        *,
        closed: asyncio.Future[str],
    ) -> None:
        reader = asyncio.ensure_future(self._read(session, frames, outbox))
        writer = asyncio.ensure_future(outbox.drain(send))
        stopper = asyncio.ensure_future(stop.wait())
        waiters: set[asyncio.Future[Any]] = {reader, writer, stopper, closed}
        try:
            done, _ = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (reader, writer, stopper):
                task.cancel()
            await asyncio.gather(reader, writer, stopper, return_exceptions=True)
        if closed.done() and not closed.cancelled():
            # transient for the worker (§4): one that is alive after all reconnects and gets work again
            raise Unavailable(closed.result())
        if reader in done:
            reader.result()
        elif writer in done and not writer.cancelled():
            exc = writer.exception()
            if isinstance(exc, ConveyorError):
                raise exc
            if exc is not None:
                raise Internal("session stream failed") from exc

    async def _read(
        self, session: SessionState, frames: AsyncIterator[pb.WorkerMessage], outbox: Outbox
    ) -> None:
        heard = self.engine.heard
        async for msg in frames:
            heard(session)
            outbox.own_turn = True
            try:
                self._frame(session, msg)
            finally:
                outbox.own_turn = False

    def _frame(self, session: SessionState, msg: pb.WorkerMessage) -> None:
        kind = msg.WhichOneof("frame")
        engine = self.engine
        if kind == "result":
            r = msg.result
            _check_result(r)
            engine.result(session, r.task_id, r.outcome, truncate(r.error_msg), r.result)
        elif kind == "heartbeat":
            engine.heartbeat(session, list(msg.heartbeat.active_task_ids))
        elif kind == "batch_result":
            for r in msg.batch_result.results:
                _check_result(r)
            engine.batch_result(
                session,
                [(r.task_id, r.outcome, truncate(r.error_msg), r.result) for r in msg.batch_result.results],
            )
        elif kind == "credit":
            n = msg.credit.n
            if n <= 0:
                raise ProtocolError(f"protocol violation: credit must be positive, got {n}")
            if n > session.concurrency:
                raise ProtocolError(
                    f"protocol violation: credit {n} exceeds declared concurrency {session.concurrency}"
                )
            engine.credit(session, n)
        elif kind == "progress":
            p = msg.progress
            if not p.task_id:
                raise ProtocolError("protocol violation: Progress without task_id")
            engine.progress(session, p.task_id, p.percent, truncate(p.message))
        elif kind == "hello":
            raise ProtocolError("protocol violation: duplicate Hello frame")
        else:
            raise ProtocolError("protocol violation: empty or unknown frame")

    async def stop(self, grace: float = 10.0) -> None:
        """Refuse new sessions, end every live one cleanly, and wait (bounded) until they are gone."""
        self.closing = True
        for stop in list(self._live.values()):
            stop.set()
        try:
            await asyncio.wait_for(self._idle.wait(), grace)
        except TimeoutError:
            log.warning("%d sessions still open after %.1fs", len(self._live), grace)
