"""The event loop between the session machine, the stream and the executor (one ``Worker.run``).

One driver coroutine owns the :class:`WorkerSession`. The walk of a frame, top-down:

1. the socket read calls the stream's listener, :meth:`Driver._on_readable`;
2. :meth:`Driver._take_frames` takes every complete frame off the stream and feeds each to the
   machine (``receive``); it is the only place frames enter, called by the listener while the
   loop waits, and by the loop itself before it waits again (frames that came while it was busy);
3. :meth:`Driver._execute` carries out the returned actions at once (none of them waits);
4. a ``Start`` finds the delivery's Job (:class:`jobs.Jobs`, built once per delivery) and the
   jobs the frames started are launched after the last frame of the read, so a Cancel read with
   its Dispatch still wins; a job's first step runs at once (``_h2kernel.eager``), so a Dispatch
   read while the loop is idle reaches its handler in the read's own turn.

Everything else (finished jobs, progress from handler threads, the executor's wakeup, connect
results, stop requests, the stream's end) is a typed event (:mod:`.events`) posted to the loop.
Timers come from the machine's ``next_deadline()`` and the injected clock
(:class:`conveyor_sdk._transport.clock.Clock`).
Every task the driver starts is awaited before ``run`` returns.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import threading
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Protocol

from conveyor_sdk._encryption.hooks import Encryptor
from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._protocol.session import (
    Abort,
    Action,
    Cancel,
    CloseSend,
    Notice,
    Reconnect,
    Send,
    Start,
    Stop,
    WorkerSession,
)
from conveyor_sdk._transport._connect import Dialer
from conveyor_sdk._transport.clock import Clock, Timer
from conveyor_sdk._transport.options import TransportOptions
from conveyor_sdk._worker.events import (
    CapacityFreed,
    Event,
    JobDone,
    Opened,
    ProgressReported,
    SessionStreamLike,
    StopRequested,
    StreamEnded,
)
from conveyor_sdk._worker.executor import Executor, JobControl
from conveyor_sdk._worker.healprobe import MIN_WAIT, HealProbe, unanswered
from conveyor_sdk._worker.jobs import Jobs
from conveyor_sdk._worker.registry import Registry
from conveyor_sdk.errors import Code, ConveyorError, Internal, InvalidArgument, ProtocolError, Unavailable

__all__ = ["Driver", "WorkerHost"]


class WorkerHost(Protocol):
    """What the driver reads from the Worker that runs it (``runner.Worker`` is one).

    A protocol here, so that this module does not import the runner (which imports it).
    """

    concurrency: int
    grace: float
    task_log: bool

    @property
    def server(self) -> str:
        """The address to connect to next (moves on when a session ends: see Backoff)."""
        ...

    @property
    def logger(self) -> logging.Logger: ...

    @property
    def rng(self) -> Callable[[], float]:
        """Random source in [0, 1): reconnect jitter, also the heal probe's."""
        ...

    @property
    def clock(self) -> Clock: ...

    @property
    def dialer(self) -> Dialer:
        """How sessions and heal probes connect."""
        ...

    @property
    def transport_options(self) -> TransportOptions: ...

    def open_session(self) -> Awaitable[SessionStreamLike]:
        """Connect to ``server`` and open the session stream."""
        ...

    def encryption_for(self, registry: Registry) -> Encryptor | None: ...


class Driver:
    """Runs one ``Worker.run``: the event loop between the machine, the stream and the executor."""

    def __init__(
        self, worker: WorkerHost, machine: WorkerSession, executor: Executor, registry: Registry
    ) -> None:
        self.worker = worker
        self.machine = machine
        self.clock = worker.clock
        self.log = worker.logger
        self.events: deque[Event] = deque()
        self.wake = asyncio.Event()
        self.stream: SessionStreamLike | None = None
        self.opener: asyncio.Task[None] | None = None
        self.reconnect_at: float | None = 0.0  # connect at once
        self.unreachable = False  # a streak of failures where nothing answered: long waits are probed
        self.cut = False  # the attempt under way was started by the probe (see healprobe.py)
        tls = worker.transport_options.tls
        self.probe = HealProbe(
            machine.backoff.addresses,
            self._accepts,
            worker.rng,
            tls=tls,
            dialer=worker.dialer,
            clock=self.clock,
        )
        control = JobControl(report_progress=self._progress_from_any_thread)
        self.jobs = Jobs(executor, registry, worker, machine=machine, control=control, post=self.post)
        self.stopped: Stop | None = None
        # True while the loop waits for an event: only then may the socket's turn take frames
        # (otherwise the loop takes them itself before it waits again).
        self.parked = False
        self.wake_at: float | None = None  # when the parked loop's timer fires (None: no timer)
        self.welcomes_logged = 0  # the machine's Welcome count last logged (see _log_welcome)
        self.last_error: str | None = None  # why the last session ended or could not open (None: Welcome)
        self.counters = self.jobs.counters
        self.counters.update(reconnects=0, frames_in_read_turn=0)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread_id = threading.get_ident()
        self.capacity_posted = False  # a CapacityFreed waits in ``events`` (see ``run``'s wakeup)

    def post(self, event: Event) -> None:
        self.events.append(event)
        self.wake.set()

    def _post_capacity(self) -> None:
        """Post a CapacityFreed unless one waits already (on the loop's thread)."""
        if not self.capacity_posted:
            self.capacity_posted = True
            self.post(CapacityFreed())

    # -- main loop -------------------------------------------------------------------------------
    async def run(self) -> None:
        self._loop = loop = asyncio.get_running_loop()

        loop_thread = threading.get_ident()

        def wakeup() -> None:
            # Executors call this on the loop's own thread as a rule (ProcessExecutor does, for
            # every finished job): post directly, no self-pipe write and read. One CapacityFreed
            # waiting is enough: when it is handled, the machine asks the executor afresh.
            if threading.get_ident() == loop_thread:
                self._post_capacity()
            elif not loop.is_closed():
                loop.call_soon_threadsafe(self._post_capacity)

        await self.jobs.executor.start(wakeup)
        try:
            await self._run_loop()
        finally:
            await self._shutdown()
        if self.stopped is not None and self.stopped.error is not None:
            raise self.stopped.error

    async def _run_loop(self) -> None:
        while self.stopped is None:
            now = self.clock.now()
            if self.reconnect_at is not None and now >= self.reconnect_at and self.opener is None:
                self.reconnect_at = None
                self.probe.cancel()
                self.opener = asyncio.create_task(self._open())
            self._execute(self.machine.tick(now, self.jobs.can_start))
            events = self.events
            while events and self.stopped is None:
                event = events.popleft()
                if type(event) is JobDone:  # one per task: handled without a coroutine of its own
                    self._job_done(event)
                else:
                    await self._handle(event)
            if self._nothing_left():
                await self._park()

    def _nothing_left(self) -> bool:
        """Whether the loop may wait: not stopped, no event, no frame (it takes those that came
        while it was busy)."""
        if self.stopped is not None:
            return False
        self._take_frames()
        return not self.events and self.stopped is None

    async def _park(self) -> None:
        """Wait for an event, a frame (taken in the read's turn) or the machine's next deadline."""
        self.wake_at = deadline = self._next_wake()
        timer: Timer | None = None if deadline is None else self.clock.call_at(deadline, self.wake.set)
        self.parked = True
        try:
            await self.wake.wait()
        finally:
            self.parked = False
            self.wake.clear()
            if timer is not None:
                timer.cancel()

    def _next_wake(self) -> float | None:
        cands = [d for d in (self.machine.next_deadline(), self.reconnect_at) if d is not None]
        return min(cands) if cands else None

    def _job_done(self, event: JobDone) -> None:
        now = self.clock.now()
        outcomes = self.jobs.finished(event.job_id, event.outcomes, now)
        try:
            actions = self.machine.job_finished(event.job_id, outcomes, now, self.jobs.can_start)
        except ProtocolError as exc:  # an executor reported a job twice: refuse, keep serving
            self.log.error("%s", exc)
            return
        self._execute(actions)

    async def _handle(self, event: Event) -> None:
        now = self.clock.now()
        machine = self.machine
        if isinstance(event, JobDone):
            self._job_done(event)
        elif isinstance(event, ProgressReported):
            self._execute(machine.progress(event.task_id, event.percent, event.message, now))
        elif isinstance(event, CapacityFreed):
            self.capacity_posted = False  # capacity freed from now on needs a new event
            self._execute(machine.capacity_changed(now, self.jobs.can_start))
        elif isinstance(event, StreamEnded):
            if event.stream is self.stream:
                await self._stream_ended(event.error)
        elif isinstance(event, Opened):
            await self._opened(event.result)
        elif isinstance(event, StopRequested):
            self._on_stop(event.grace, now)

    def _on_stop(self, grace: float | None, now: float) -> None:
        # An explicit grace wins; otherwise the first stop drains, a second releases at once.
        if grace is None:
            grace = 0.0 if self.machine.draining else self.worker.grace
        self.log.info("draining (grace %.1fs)", grace)
        self._execute(self.machine.drain(now, grace))
        if grace == 0 and self.stream is not None and self.stream.write_blocked:
            # Stopping at once: bytes that wait to be written would hold the close back for up
            # to the keepalive timeout. The server releases the session's tasks on the close.
            self._end_stream_next(Unavailable("stopped at once while writes to the server waited"))

    def _execute(self, actions: list[Action]) -> None:
        """Carry out the machine's actions, in order; none waits (a stream's end is the next event)."""
        for action in actions:
            if isinstance(action, Start):
                self.jobs.start(action.delivery, action.deadline)
            elif isinstance(action, Send):
                self._send(action.message)
            elif isinstance(action, Cancel):
                self.jobs.cancel(action.job_id, action.reason)
            elif isinstance(action, Notice):
                self.log.warning("%s", action.message)
            elif isinstance(action, CloseSend):
                if self.stream is not None:  # after what is queued; the machine's close timeout bounds it
                    self.stream.close_send_nowait()
            elif isinstance(action, Abort):
                self.log.warning("aborting session: %s", action.error)
                self._end_stream_next(action.error)
            elif isinstance(action, Reconnect):
                self._reconnect_in(action.delay)
            elif isinstance(action, Stop):
                self._stop(action)

    def _reconnect_in(self, delay: float) -> None:
        self.counters["reconnects"] += 1
        self.log.warning(  # every wait is logged, 0 s included: an idle worker says why
            "reconnecting to %s in %.2fs (%s)", self.worker.server, delay, self.machine.backoff
        )
        self.reconnect_at = self.clock.now() + delay
        if self.unreachable and delay > MIN_WAIT:
            self.probe.start()  # see healprobe.py: an unreachable address is probed meanwhile

    def _accepts(self, index: int) -> None:
        """The heal probe found ``servers[index]`` accepting: cut the reconnect wait short."""
        now = self.clock.now()
        if self.reconnect_at is None or self.opener is not None or self.stopped is not None:
            return
        self.machine.backoff.point_at(index)
        self.cut = True
        self.log.info(
            "%s answers again: reconnecting now, not in %.2fs",
            self.worker.server,
            max(0.0, self.reconnect_at - now),
        )
        self.reconnect_at = now
        self.wake.set()  # the loop may be parked on the old wait's timer

    def _stop(self, action: Stop) -> None:
        self.stopped = action
        self.reconnect_at = None
        self.probe.cancel()
        if action.error is not None:
            self.log.error("fatal session error, not reconnecting: %s", action.error)

    # -- stream: frames in -----------------------------------------------------------------------
    def _on_readable(self) -> None:
        """The stream's listener (socket turn): frames arrived, or the stream ended. Never raises."""
        if self.parked:
            self._take_frames()

    def _take_frames(self) -> None:
        """Feed every frame the stream holds to the machine and carry out its actions; the one
        way in for frames. Jobs the frames start are launched after the last one (see ``Jobs``).

        Stops when an event is queued (the loop handles it first, in order) and, once the
        stream is drained and has ended, posts its end. Runs in the socket's turn: never raises.
        """
        stream = self.stream
        if stream is None:
            return
        in_read_turn = self.parked
        launches = self.jobs.hold_launches()
        try:
            while not self.events and self.stopped is None and stream is self.stream:
                msg = stream.recv_nowait()
                if msg is None:
                    if stream.finished:
                        self.post(StreamEnded(stream, stream.error))
                    break
                actions = self.machine.receive(msg, self.clock.now(), self.jobs.can_start)
                if self.machine.welcomes != self.welcomes_logged:
                    self._log_welcome()
                self._execute(actions)
                if in_read_turn:
                    self.counters["frames_in_read_turn"] += 1
                    if not self._timer_still_right(actions):
                        self.wake.set()  # the loop re-reads the machine's next deadline
        except ConveyorError as exc:
            self.post(StreamEnded(stream, exc))
        except Exception as exc:  # isolation point: a socket callback must never raise
            self.post(StreamEnded(stream, Internal(f"session stream failed: {exc!r}")))
        finally:
            failure = self.jobs.launch_held(launches, eager=in_read_turn)  # after a failed frame too
        if failure is not None:
            self.post(StreamEnded(stream, failure))

    def _timer_still_right(self, actions: list[Action]) -> bool:
        """Whether the parked loop's timer still fires early enough after this frame.

        Cheap where it matters (no scan of every job): a Dispatch that started at once only
        adds its own deadline; anything else (parked deliveries, other frames) re-arms.
        """
        if self.machine.last_frame != "dispatch" or not actions:  # the machine read the oneof already
            return False
        armed = self.wake_at
        for action in actions:
            if not isinstance(action, Start):
                return False
            if action.deadline is not None and (armed is None or action.deadline < armed):
                return False
        return armed is not None

    def _log_welcome(self) -> None:
        m = self.machine
        self.welcomes_logged = m.welcomes
        self.last_error = None
        self.log.info("session %s established (server %s)", m.session_id, m.server_version)

    # -- stream: frames out, open, end -------------------------------------------------------------
    def _send(self, msg: pb.WorkerMessage) -> None:
        """Queue ``msg`` on the stream; never waits, so a stuck write cannot stall this loop (its
        timers, a drain, a second signal). The stream's keepalive ends a write that cannot drain."""
        stream = self.stream
        if stream is None:
            return
        try:
            stream.send_nowait(msg)
        except ConveyorError as exc:
            self._end_stream_next(exc)
        except Exception as exc:  # isolation point
            self._end_stream_next(Internal(f"send failed: {exc!r}"))

    def _end_stream_next(self, error: ConveyorError) -> None:
        """End the current stream with ``error`` as the loop's very next event."""
        if self.stream is not None:
            self.events.appendleft(StreamEnded(self.stream, error))
            self.wake.set()

    async def _open(self) -> None:
        try:
            self.log.info("connecting to %s", self.worker.server)
            stream = await self.worker.open_session()
        except ConveyorError as exc:
            self.post(Opened(exc))
        except Exception as exc:  # isolation point: foreign errors become ConveyorError
            self.post(Opened(Internal(f"cannot open session: {exc!r}")))
        else:
            self.post(Opened(stream))

    async def _opened(self, result: SessionStreamLike | ConveyorError) -> None:
        self.opener = None
        now = self.clock.now()
        if isinstance(result, ConveyorError):
            result = _unverified_is_fatal(result, self.worker.server)
            self.last_error = result.message
            self._streak(result)
            if result.code is not Code.INVALID_ARGUMENT:
                self.log.warning("cannot connect to %s: %s", self.worker.server, result)
            self._execute(self.machine.connection_lost(result, now))
            return
        if self.stopped is not None:
            await result.aclose()
            return
        self.stream = result
        result.set_listener(self._on_readable)
        self._execute(self.machine.connect(now))
        # Frames that came with the connect are taken by the loop before it waits.

    def _streak(self, error: ConveyorError | None) -> None:
        """Track the streak of unanswered failures that lets the heal probe run (healprobe.py)."""
        if unanswered(error):
            self.unreachable = True
        elif self.cut:  # the server answered the probe but failed the session: plain backoff now
            self.unreachable = False
        self.cut = False

    async def _stream_ended(self, error: ConveyorError | None) -> None:
        if self.machine.backoff.failures == 0:  # it had its Welcome: a streak starts only if the link died
            self.unreachable, self.cut = unanswered(error), False
        else:
            self._streak(error)
        stream, self.stream = self.stream, None
        if error is not None:
            self.last_error = error.message
            self.log.warning("session ended: %s", error)
        elif self.machine.draining:  # our half-close after the drain; the server only answered it
            self.log.info("session closed: this worker drained and ended it")
        else:
            self.log.info("session ended by the server")
        # The machine learns of the loss before the close is awaited, so the phase a caller
        # reads meanwhile is no longer the dead session's "open"; what it decided waits for it.
        actions = self.machine.connection_lost(error, self.clock.now())
        self.jobs.forget_unstarted()  # parked deliveries of that stream are gone
        await self._close_stream(stream)
        self._execute(actions)

    async def _close_stream(self, stream: SessionStreamLike | None) -> None:
        if stream is not None:
            stream.set_listener(None)
            try:
                await stream.aclose()
            except Exception as exc:  # isolation point: closing must not fail the worker
                self.log.debug("error closing stream: %r", exc)

    # -- from other threads ------------------------------------------------------------------------
    def _progress_from_any_thread(self, task_id: str, percent: int, message: str) -> None:
        event = ProgressReported(task_id, percent, message)
        if threading.get_ident() == self._thread_id:
            self.post(event)
            return
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self.post, event)

    # -- teardown ----------------------------------------------------------------------------------
    async def _shutdown(self) -> None:
        self.probe.cancel()
        if self.opener is not None:
            self.opener.cancel()
            await asyncio.gather(self.opener, return_exceptions=True)
        stream, self.stream = self.stream, None
        await self._close_stream(stream)
        await self.jobs.shutdown(wait=self.worker.grace + 10)


def _unverified_is_fatal(error: ConveyorError, server: str) -> ConveyorError:
    """A server certificate that does not verify is configuration, not an outage: retrying cannot
    help, so it becomes a fatal InvalidArgument that says what to pass (the worker stops)."""
    cause: BaseException | None = error
    while cause is not None and not isinstance(cause, ssl.SSLCertVerificationError):
        cause = cause.__cause__ or cause.__context__
    if cause is None:
        return error
    reason = getattr(cause, "verify_message", "") or str(cause)
    fatal = InvalidArgument(
        f"the TLS certificate of {server} does not verify ({reason}): pass the CA that signed it with "
        "--ca-file / CONVEYOR_CA_FILE (Worker(tls=TLSOptions(ca_file=...))), or check --server"
    )
    fatal.__cause__ = error
    return fatal
