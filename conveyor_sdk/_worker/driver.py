"""The event loop between the session machine, the stream and the executor (one ``Worker.run``).

One driver coroutine owns the :class:`WorkerSession`. Everything else (the stream
reader, finished jobs, progress from handler threads, the executor's wakeup, stop
requests) posts events to it; it feeds each event to the machine and performs the
returned actions (send, start, cancel, half-close, reconnect, stop). Timers come from
the machine's ``next_deadline()``. Every task the driver starts is awaited before
``run`` returns.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import ssl
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from conveyor_sdk._encryption.hooks import Encryptor
from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._h2kernel.eager import eager_task
from conveyor_sdk._protocol.inflight import Delivery
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
from conveyor_sdk._protocol.types import CancelReason
from conveyor_sdk._worker.convert import job_for_delivery, with_deadline
from conveyor_sdk._worker.executor import Executor, Job, JobControl, Outcome, OutcomeKind
from conveyor_sdk._worker.healprobe import MIN_WAIT, HealProbe, unanswered
from conveyor_sdk._worker.outcomes import cancelled_outcome, log_abandoned, log_finished, never_retried
from conveyor_sdk._worker.registry import Registry
from conveyor_sdk._worker.unseal import run_opened, sealed
from conveyor_sdk.errors import Code, ConveyorError, Internal, InvalidArgument, ProtocolError, Unavailable

__all__ = ["Driver", "WorkerHost"]

Event = tuple[Any, ...]


class WorkerHost(Protocol):
    """What the driver reads from the Worker that runs it (``runner.Worker`` is one).

    A protocol here, so that this module does not import the runner (which imports it).
    """

    concurrency: int
    grace: float
    _log: logging.Logger
    _loop: asyncio.AbstractEventLoop | None
    _rng: Callable[[], float]  # reconnect jitter, also the heal probe's
    task_log: bool

    @property
    def server(self) -> str:
        """The address to connect to next (moves on when a session ends: see Backoff)."""
        ...

    def _transport(self) -> tuple[Callable[..., Any], Any]: ...

    def encryption_for(self, registry: Registry) -> Encryptor | None: ...


class Driver:
    """Runs one ``Worker.run``: the event loop between the machine, the stream and the executor."""

    def __init__(
        self, worker: WorkerHost, machine: WorkerSession, executor: Executor, registry: Registry
    ) -> None:
        self.worker = worker
        self.machine = machine
        self.executor = executor
        self.registry = registry
        self.log = worker._log
        self.events: deque[Event] = deque()
        self.wake = asyncio.Event()
        self.stream: Any = None
        self.stream_epoch = 0
        self.reader: asyncio.Task[None] | None = None
        self.opener: asyncio.Task[None] | None = None
        self.reconnect_at: float | None = 0.0  # connect at once
        self.unreachable = False  # a streak of failures where nothing answered: long waits are probed
        self.cut = False  # the attempt under way was started by the probe (see healprobe.py)
        tls = getattr(worker._transport()[1], "tls", None)
        self.probe = HealProbe(machine.backoff.addresses, self._accepts, worker._rng, tls=tls)
        self.jobs: dict[str, asyncio.Task[None]] = {}
        # Jobs whose task has not taken its first step yet, with a cancel that came meanwhile.
        self.unstarted: dict[str, CancelReason | None] = {}
        # Jobs started while ``_take_frames`` handles one read; launched once the read is done.
        self.launching: list[Job] | None = None
        # An executor whose ``run`` is a plain method hands a job off in its synchronous part
        # (ProcessExecutor sends the RunJob): the read turn calls it, before any task step.
        self.run_hands_off = not inspect.iscoroutinefunction(executor.run)
        # The Job built for a delivery (by can_start, reused by Start), keyed by job id and
        # valid only for that very delivery: a later delivery of the same id (a retry of a
        # parked job that was answered unstarted) carries new fields and gets a new Job.
        self.job_cache: dict[str, tuple[Delivery, Job]] = {}
        self.stopped: Stop | None = None
        self.parked = False  # True while the loop waits for an event (nothing mid-flight)
        self.armed: float | None = None  # when the parked loop's timer fires (None: no timer)
        self.welcomes_logged = 0  # the machine's Welcome count last logged (see _log_welcome)
        self.last_error: str | None = None  # why the last session ended or could not open (None: Welcome)
        self.counters: dict[str, int] = {
            "jobs_started": 0,
            "handler_failures": 0,
            "reconnects": 0,
            "frames_in_read_turn": 0,  # frames handled by the read-time fast path (_take_frames)
        }
        self._control = JobControl(report_progress=self._progress_from_any_thread)
        self._thread_id = threading.get_ident()

    def post(self, event: Event) -> None:
        self.events.append(event)
        self.wake.set()

    # -- main loop -------------------------------------------------------------------------------
    async def run(self) -> None:
        loop = asyncio.get_running_loop()

        def wakeup() -> None:
            if not loop.is_closed():
                loop.call_soon_threadsafe(self.post, ("wakeup",))

        await self.executor.start(wakeup)
        try:
            await self._loop()
        finally:
            await self._shutdown()
        if self.stopped is not None and self.stopped.error is not None:
            raise self.stopped.error

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while self.stopped is None:
            now = time.time()
            if self.reconnect_at is not None and now >= self.reconnect_at and self.opener is None:
                self.reconnect_at = None
                self.probe.cancel()
                self.opener = asyncio.create_task(self._open())
            await self._execute(self.machine.tick(now, self._can_start))
            while self.events and self.stopped is None:
                await self._handle(self.events.popleft())
            if self.stopped is not None or self.events:
                continue
            deadline = self.armed = self._next_wake()
            timer = (
                None if deadline is None else loop.call_later(max(0.0, deadline - time.time()), self.wake.set)
            )
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

    async def _handle(self, event: Event) -> None:
        kind = event[0]
        now = time.time()
        if kind == "frame":
            if event[1] == self.stream_epoch:
                await self._execute(self._receive(event[2], now))
        elif kind == "actions":  # left over by the read-time fast path (see _take_frames)
            await self._execute(event[1])
        elif kind == "done":
            outcomes = self._report(event[1], event[2], event[3] if len(event) > 3 else None, now)
            self.jobs.pop(event[1], None)
            try:
                actions = self.machine.job_finished(event[1], outcomes, now, self._can_start)
            except ProtocolError as exc:  # an executor reported a job twice: refuse, keep serving
                self.log.error("%s", exc)
                return
            await self._execute(actions)
        elif kind == "progress":
            await self._execute(self.machine.progress(event[1], event[2], event[3], now))
        elif kind == "wakeup":
            await self._execute(self.machine.capacity_changed(now, self._can_start))
        elif kind == "eof":
            if event[1] == self.stream_epoch:
                await self._stream_ended(event[2])
        elif kind == "opened":
            await self._opened(event[1])
        elif kind == "stop":
            await self._on_stop(event[1], now)

    async def _on_stop(self, grace: float | None, now: float) -> None:
        # An explicit grace wins; otherwise the first stop drains, a second releases at once.
        if grace is None:
            grace = 0.0 if self.machine.draining else self.worker.grace
        self.log.info("draining (grace %.1fs)", grace)
        await self._execute(self.machine.drain(now, grace))
        if grace == 0 and self.stream is not None and self.stream.write_blocked:
            # Stopping at once: bytes that wait to be written would hold the close back for up
            # to the keepalive timeout. The server releases the session's tasks on the close.
            await self._stream_ended(Unavailable("stopped at once while writes to the server waited"))

    def _execute_now(self, action: Action) -> bool:
        """Carry out an action that needs no waiting; False if it must be awaited."""
        if isinstance(action, Start):
            self._start(action.delivery, action.deadline)
        elif isinstance(action, Cancel):
            if action.job_id in self.unstarted:  # the executor has not seen the job yet
                self.unstarted[action.job_id] = action.reason
            else:
                self.executor.cancel(action.job_id, action.reason)
        elif isinstance(action, Notice):
            self.log.warning("%s", action.message)
        else:
            return False
        return True

    async def _execute(self, actions: list[Action]) -> None:
        for action in actions:
            if self._execute_now(action):
                continue
            if isinstance(action, Send):
                self._send(action.message)
            elif isinstance(action, CloseSend):
                self._close_send()
            elif isinstance(action, Abort):
                self.log.warning("aborting session: %s", action.error)
                await self._stream_ended(action.error)
            elif isinstance(action, Reconnect):
                self.counters["reconnects"] += 1
                self.log.warning(  # every wait is logged, 0 s included: an idle worker says why
                    "reconnecting to %s in %.2fs (%s)", self.worker.server, action.delay, self.machine.backoff
                )
                self.reconnect_at = time.time() + action.delay
                if self.unreachable and action.delay > MIN_WAIT:
                    self.probe.start()  # see healprobe.py: an unreachable address is probed meanwhile
            elif isinstance(action, Stop):
                self._stop(action)

    def _accepts(self, index: int) -> None:
        """The heal probe found ``servers[index]`` accepting: cut the reconnect wait short."""
        now = time.time()
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

    # -- stream ------------------------------------------------------------------------------------
    async def _open(self) -> None:
        open_session, opts = self.worker._transport()
        try:
            self.log.info("connecting to %s", self.worker.server)
            stream = await open_session(self.worker.server, opts)
        except ConveyorError as exc:
            self.post(("opened", exc))
        except Exception as exc:  # isolation point: foreign errors become ConveyorError
            self.post(("opened", Internal(f"cannot open session: {exc!r}")))
        else:
            self.post(("opened", stream))

    async def _opened(self, result: Any) -> None:
        self.opener = None
        now = time.time()
        if isinstance(result, ConveyorError):
            result = _unverified_is_fatal(result, self.worker.server)
            self.last_error = result.message
            self._streak(result)
            if result.code is not Code.INVALID_ARGUMENT:
                self.log.warning("cannot connect to %s: %s", self.worker.server, result)
            await self._execute(self.machine.connection_lost(result, now))
            return
        if self.stopped is not None:
            await result.aclose()
            return
        self.stream = result
        actions = self.machine.connect(now)
        self.stream_epoch = epoch = self.machine.epoch
        result.set_listener(functools.partial(self._take_frames, result, epoch))
        self.reader = asyncio.create_task(self._read(result, self.stream_epoch))
        await self._execute(actions)

    def _take_frames(self, stream: Any, epoch: int) -> None:
        """Socket-callback fast path: while the loop is parked, handle frames in the read's own turn.

        A Dispatch then starts its job in the read's own turn (the job's first step runs in
        :meth:`_launch`), instead of three turns later (reader task, driver, job task). Actions
        that must be awaited (sends, reconnects) go to the loop as one event, in order; frames
        the loop is not free for stay queued on the stream for the reader task. Jobs the read's
        frames start are launched after the last of them, so a Cancel read with its Dispatch
        still wins (see :meth:`_launch`).
        Runs inside ``data_received``: never raises.
        """
        launching: list[Job] = []
        self.launching = launching
        try:
            while self.parked and not self.events and self.stopped is None and epoch == self.stream_epoch:
                msg = stream.recv_nowait()
                if msg is None:
                    break
                self.counters["frames_in_read_turn"] += 1
                actions = self.machine.receive(msg, time.time(), self._can_start)
                if self.machine.welcomes != self.welcomes_logged:
                    self._log_welcome()
                for i, action in enumerate(actions):
                    if not self._execute_now(action):
                        self.post(("actions", actions[i:]))
                        break
                if not self._timer_still_right(msg, actions):
                    self.wake.set()  # the loop re-reads the machine's next deadline
        except ConveyorError as exc:
            self.post(("eof", epoch, exc))
        except Exception as exc:  # isolation point: a socket callback must never raise
            self.post(("eof", epoch, Internal(f"session stream failed: {exc!r}")))
        finally:
            self.launching = None
        for job in launching:  # also after a failed frame: these jobs are started in the machine
            try:
                self._launch(job, in_read_turn=True)
            except Exception as exc:  # isolation point: a socket callback must never raise
                self.post(("eof", epoch, Internal(f"cannot start job {job.job_id}: {exc!r}")))

    def _timer_still_right(self, msg: pb.ServerMessage, actions: list[Action]) -> bool:
        """Whether the parked loop's timer still fires early enough after this frame.

        Cheap on the hot path (no scan of every job): a Dispatch that started at once only
        adds its own deadline; anything else (parked deliveries, other frames) re-arms.
        """
        if self.machine.last_frame != "dispatch" or not actions:  # the machine read the oneof already
            return False
        armed = self.armed
        for action in actions:
            if not isinstance(action, Start):
                return False
            if action.deadline is not None and (armed is None or action.deadline < armed):
                return False
        return armed is not None

    def _receive(self, msg: pb.ServerMessage, now: float) -> list[Action]:
        """A frame the reader task read (the read-turn path inlines this)."""
        actions = self.machine.receive(msg, now, self._can_start)
        if self.machine.welcomes != self.welcomes_logged:
            self._log_welcome()
        return actions

    def _log_welcome(self) -> None:
        m = self.machine
        self.welcomes_logged = m.welcomes
        self.last_error = None
        self.log.info("session %s established (server %s)", m.session_id, m.server_version)

    async def _read(self, stream: Any, epoch: int) -> None:
        try:
            while True:
                msg = await stream.recv()
                if msg is None:
                    self.post(("eof", epoch, None))
                    return
                self.post(("frame", epoch, msg))
        except ConveyorError as exc:
            self.post(("eof", epoch, exc))
        except Exception as exc:  # isolation point: foreign errors become ConveyorError
            self.post(("eof", epoch, Internal(f"session stream failed: {exc!r}")))

    def _send(self, msg: pb.WorkerMessage) -> None:
        """Queue ``msg`` on the stream; never waits, so a stuck write cannot stall this loop (its
        timers, a drain, a second signal). The stream's keepalive ends a write that cannot drain."""
        stream, epoch = self.stream, self.stream_epoch
        if stream is None:
            return
        try:
            stream.send_nowait(msg)
        except ConveyorError as exc:
            self.post(("eof", epoch, exc))
        except Exception as exc:  # isolation point
            self.post(("eof", epoch, Internal(f"send failed: {exc!r}")))

    def _close_send(self) -> None:
        """Half-close after what is queued; the machine's close timeout bounds the wait for the end."""
        if self.stream is not None:
            self.stream.close_send_nowait()

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
        stream, reader = self.stream, self.reader
        self.stream, self.reader = None, None
        self.stream_epoch = -1
        if error is not None:
            self.last_error = error.message
            self.log.warning("session ended: %s", error)
        elif self.machine.draining:  # our half-close after the drain; the server only answered it
            self.log.info("session closed: this worker drained and ended it")
        else:
            self.log.info("session ended by the server")
        await self._close_stream(stream, reader)
        self.job_cache.clear()  # parked deliveries of that stream are gone
        await self._execute(self.machine.connection_lost(error, time.time()))

    async def _close_stream(self, stream: Any, reader: asyncio.Task[None] | None) -> None:
        if stream is not None:
            stream.set_listener(None)
            try:
                await stream.aclose()
            except Exception as exc:  # isolation point: closing must not fail the worker
                self.log.debug("error closing stream: %r", exc)
        if reader is not None:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)

    # -- jobs ----------------------------------------------------------------------------------------
    def _job(self, delivery: Delivery) -> Job:
        cached = self.job_cache.get(delivery.job_id)
        if cached is not None and cached[0] is delivery:
            return cached[1]
        job = job_for_delivery(delivery, self.registry)
        if len(self.job_cache) > 4 * self.worker.concurrency + 64:  # drop answered-unstarted ones
            self.job_cache = {k: v for k, v in self.job_cache.items() if self.machine.job(k)}
        self.job_cache[delivery.job_id] = (delivery, job)
        return job

    def _can_start(self, delivery: Delivery) -> bool:
        return self.executor.can_start(self._job(delivery))

    def _start(self, delivery: Delivery, deadline: float | None) -> None:
        cached = self.job_cache.pop(delivery.job_id, None)  # what _can_start built, as a rule
        if cached is None or cached[0] is not delivery:
            job = job_for_delivery(delivery, self.registry, deadline)
        elif cached[1].deadline != deadline:
            job = with_deadline(cached[1], deadline)
        else:
            job = cached[1]
        self.counters["jobs_started"] += 1
        self.unstarted[job.job_id] = None
        if self.launching is not None:
            self.launching.append(job)
        else:
            self._launch(job, in_read_turn=False)

    def _launch(self, job: Job, *, in_read_turn: bool) -> None:
        """Create the job's task; in the read turn, run its first step at once, inside that task.

        A hand-off executor first gets the job (``run``'s synchronous part), only if no Cancel
        reached it yet; that takes it out of ``unstarted``: from then on a Cancel goes to the
        executor. Any other job's first step is the handler's start: in the read turn it runs
        before the rest of the read and the loop's next turn (see ``_h2kernel.eager.eager_task``).
        """
        handed: Awaitable[list[Outcome]] | None = None
        loop = asyncio.get_running_loop()
        name = f"conveyor-job-{job.job_id}"
        if not in_read_turn:  # the loop's own create_task: asyncio.create_task wraps it in Python
            self.jobs[job.job_id] = loop.create_task(self._run_job(job), name=name)
            return
        if self.run_hands_off and self.unstarted[job.job_id] is None and not sealed(job):
            del self.unstarted[job.job_id]
            try:
                handed = self.executor.run(job, self._control)
            except Exception as exc:  # isolation point: becomes the job's RETRY outcome in _run_job
                failed: asyncio.Future[list[Outcome]] = loop.create_future()
                failed.set_exception(exc)
                handed = failed
        self.jobs[job.job_id] = eager_task(loop, self._run_job(job, handed), name)

    async def _run_job(self, job: Job, handed: Awaitable[list[Outcome]] | None = None) -> None:
        if handed is None and self.unstarted.pop(job.job_id, None) is not None:
            # Cancelled between Start and this first step (e.g. Dispatch and Cancel in one read):
            # the handler never runs; the machine turns this into the cancel reason's outcome.
            self.post(("done", job.job_id, [cancelled_outcome() for _ in job.tasks], job))
            return
        try:
            if handed is not None:  # the executor has it already (see _launch)
                outcomes = await handed
            elif sealed(job):
                outcomes = await run_opened(
                    job,
                    lambda opened: self.executor.run(opened, self._control),
                    lambda: self.worker.encryption_for(self.registry),
                )
            else:  # plaintext (the usual case): one coroutine less between the Dispatch and the handler
                outcomes = await self.executor.run(job, self._control)
        except asyncio.CancelledError:
            outcomes = [Outcome(OutcomeKind.RELEASED, "worker stopped")] * len(job.tasks)
            self.post(("done", job.job_id, outcomes, job))
            raise
        except Exception as exc:  # isolation point: an executor failure is the task's outcome
            self.log.exception("executor failed on %s", job.job_id)
            outcomes = [Outcome(OutcomeKind.RETRY, f"executor failed: {exc!r}")] * len(job.tasks)
        self.post(("done", job.job_id, outcomes, job))

    def _report(self, job_id: str, outcomes: list[Outcome], job: Job | None, now: float) -> list[Outcome]:
        """Settle and log a finished job's outcomes: one line per task, failures counted.

        A task type declared ``max_retry=0`` gets SKIP_RETRY for a failed attempt (see
        ``never_retried``); cancelled outcomes are logged as what the machine will send
        (a timeout is "deadline exceeded" with its retry fate, a drain a release).
        """
        task_log = self.worker.task_log
        if not task_log and all(o.kind is OutcomeKind.SUCCESS for o in outcomes):
            return outcomes  # the hot path at very high rates: nothing to say
        rec = self.machine.job(job_id)
        reason = rec.cancel_reason if rec is not None else None
        tasks = job.tasks if job is not None and len(job.tasks) == len(outcomes) else ()
        if job is not None:
            spec = self.registry.lookup(job.type)
            if spec is not None and spec.options.get("max_retry") == 0:
                outcomes = [never_retried(o, reason) for o in outcomes]
        duration = now - rec.started_at if rec is not None and rec.started_at is not None else None
        if rec is not None and rec.orphaned:  # nothing will be reported: say so, claim no fate
            log_abandoned(self.log, tasks, job_id, duration)
            return outcomes
        for i, outcome in enumerate(outcomes):
            task = tasks[i] if tasks else None
            if log_finished(
                self.log, task, job_id, outcome, reason=reason, duration=duration, task_log=task_log
            ):
                self.counters["handler_failures"] += 1
        return outcomes

    def _progress_from_any_thread(self, task_id: str, percent: int, message: str) -> None:
        event = ("progress", task_id, percent, message)
        if threading.get_ident() == self._thread_id:
            self.post(event)
            return
        loop = self.worker._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self.post, event)

    # -- teardown ----------------------------------------------------------------------------------
    async def _shutdown(self) -> None:
        self.probe.cancel()
        if self.opener is not None:
            self.opener.cancel()
            await asyncio.gather(self.opener, return_exceptions=True)
        await self._close_stream(self.stream, self.reader)
        self.stream = self.reader = None
        for job_id in list(self.jobs):
            self.executor.cancel(job_id, CancelReason.DRAIN)
        if self.jobs:
            await asyncio.wait(list(self.jobs.values()), timeout=self.worker.grace + 10)
        for task in self.jobs.values():
            task.cancel()
        await asyncio.gather(*self.jobs.values(), return_exceptions=True)
        await self.executor.close(0.0)


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
