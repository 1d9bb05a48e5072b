"""Child process entry point: ``python -m conveyor_sdk._runtime.child --app SPEC --rfd R --wfd W``.

Life of a child:

1. Ask the kernel to SIGKILL us when the supervisor dies (``PR_SET_PDEATHSIG``),
   ignore the terminal's SIGINT (the supervisor decides what a Ctrl-C means).
2. Import the app once. On failure send :class:`ImportFailed` and exit 3/4.
3. Send :class:`Ready`, then serve frames on an asyncio loop: each ``RunJob``
   runs through the worker core's :func:`invoke_async` (async handlers on this
   loop, sync handlers in a thread pool of ``--capacity`` threads) and is
   answered by one ``JobDone``. ``Beat`` frames go out every ``--beat``
   seconds from the loop, so a loop blocked by a handler shows up as silence.
4. ``Stop`` -> finish running jobs, exit 0. End of file on the command pipe
   (the supervisor is gone) -> exit at once.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import contextvars
import ctypes
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from conveyor_sdk._h2kernel.eager import eager_task
from conveyor_sdk._runtime import pipe
from conveyor_sdk._runtime.appload import AppLoadError, load_app
from conveyor_sdk._runtime.mstore import STORE
from conveyor_sdk._runtime.outbox import Outbox
from conveyor_sdk._runtime.rss import read_rss
from conveyor_sdk._transport import eventloop
from conveyor_sdk._worker.context import CancelSignal, ProgressSink
from conveyor_sdk._worker.executor import CancelReason, Outcome, OutcomeKind
from conveyor_sdk._worker.invoke import begin_async
from conveyor_sdk._worker.registry import Registry

__all__ = ["current_task_id", "main"]

log = logging.getLogger("conveyor.runtime.child")
current_task_id: contextvars.ContextVar[str] = contextvars.ContextVar("conveyor_task_id", default="")
_PR_SET_PDEATHSIG = 1
T = TypeVar("T")


def set_parent_death_signal() -> None:
    """Linux: die with SIGKILL when the parent exits (best effort elsewhere)."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _warm() -> None:
    """Nothing: run once in the thread pool so its first thread exists before the first job."""


class _ContextPool(ThreadPoolExecutor):
    """A thread pool that runs each call in a copy of the submitter's context (task id for logs)."""

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        ctx = contextvars.copy_context()
        return super().submit(ctx.run, fn, *args, **kwargs)


class _Reader(asyncio.Protocol):
    def __init__(self, child: ChildLoop) -> None:
        self.child = child
        self.frames = pipe.FrameReader()

    def data_received(self, data: bytes) -> None:
        for message in self.frames.feed(data):
            self.child.on_message(message)

    def eof_received(self) -> bool:
        self.child.on_parent_gone()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.child.on_parent_gone()


class ChildLoop:
    """Serves jobs from the supervisor until told to stop."""

    def __init__(self, registry: Registry, rfd: int, wfd: int, *, capacity: int, beat: float) -> None:
        self.registry = registry
        self.rfd, self.wfd = rfd, wfd
        self.capacity = capacity
        self.beat = beat
        self.signals: dict[str, CancelSignal] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self.stopping = False
        self.done = asyncio.Event()
        self.writer: asyncio.WriteTransport | None = None
        self.outbox = Outbox(lambda: self.writer)
        self.metrics_dropped = 0  # STORE.dropped as last reported
        self._sink: ProgressSink | None = None

    async def serve(self) -> None:
        loop = asyncio.get_running_loop()
        loop.set_default_executor(_ContextPool(self.capacity, thread_name_prefix="conveyor-sync"))
        self.writer, _ = await loop.connect_write_pipe(asyncio.Protocol, os.fdopen(self.wfd, "wb", 0))
        await loop.connect_read_pipe(lambda: _Reader(self), os.fdopen(self.rfd, "rb", 0))
        spec_types = sorted(s.type for s in self.registry)
        sync_types = sorted(s.type for s in self.registry if not s.is_async)
        if sync_types:
            # Start the pool's first thread now, not inside the first job: that job would take
            # a few ms more (more on a loaded machine) while a warm child churns through short
            # tasks of one queue, skewing the weighted share of the first starts.
            await loop.run_in_executor(None, _warm)
        self.send(pipe.Ready(os.getpid(), spec_types, sync_types))
        beats = asyncio.create_task(self._beat())
        try:
            await self.done.wait()
        finally:
            beats.cancel()
        self.ship_metrics()  # the last values, so the supervisor keeps this child's final totals
        self.outbox.flush()
        if self.writer is not None:
            for _ in range(500):  # let a full pipe drain (bounded: ~5 s)
                if not self.writer.get_write_buffer_size():
                    break
                await asyncio.sleep(0.01)
            self.writer.close()

    def send(self, message: pipe.PipeMessage, *, soon: bool = False) -> None:
        """Send a frame (see :class:`Outbox`: the first of a loop turn leaves at once, unless ``soon``)."""
        if self.writer is not None and not self.writer.is_closing():
            self.outbox.send(pipe.encode(message), soon=soon)

    async def _beat(self) -> None:
        while True:
            self.send(pipe.Beat(read_rss(), len(self.tasks)))  # rss.py: /proc, else the getrusage peak
            self.ship_metrics()  # also what background threads recorded between jobs
            await asyncio.sleep(self.beat)

    def ship_metrics(self) -> None:
        """Send the custom metrics that changed (``conveyor_sdk.metrics``), if any."""
        if not STORE.dirty and STORE.dropped == self.metrics_dropped:
            return
        families, samples = STORE.collect()
        self.metrics_dropped = STORE.dropped
        decls = [
            pipe.MetricFamilyMsg(f.name, f.kind, f.help, list(f.labels), list(f.buckets), f.mode)
            for f in families
        ]
        self.send(pipe.MetricsReport(decls, [(n, list(v), c) for n, v, c in samples], self.metrics_dropped))

    def on_message(self, message: pipe.PipeMessage) -> None:
        if isinstance(message, pipe.RunJob):
            # The job's CancelSignal exists from now on: a CancelJob read right behind its RunJob
            # (same read, or before the job's first step) reaches it instead of being dropped.
            sig = self.signals[message.job_id] = CancelSignal()
            # Called from the pipe's data_received: the handler starts now, inside its own task,
            # not a loop turn later (see _h2kernel.eager.eager_task).
            name = f"conveyor-job-{message.job_id}"
            task = eager_task(asyncio.get_running_loop(), self._run(message, sig), name)
            self.tasks.add(task)
            task.add_done_callback(self._finished)
        elif isinstance(message, pipe.CancelJob):
            target = self.signals.get(message.job_id)
            if target is not None:
                target.set(CancelReason(message.reason))
        elif isinstance(message, pipe.Stop):
            self.stopping = True
            self._maybe_done()

    def _finished(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        self._maybe_done()

    def _maybe_done(self) -> None:
        if self.stopping and not self.tasks:
            self.done.set()

    def on_parent_gone(self) -> None:
        # The supervisor is gone: nobody can receive our results any more.
        os._exit(0)

    def _progress_sink(self) -> ProgressSink:
        """The one sink every job reports progress through (built once: it only needs the loop)."""
        if self._sink is None:
            self._sink = self._new_progress_sink()
        return self._sink

    def _new_progress_sink(self) -> ProgressSink:
        loop = asyncio.get_running_loop()
        loop_thread = threading.get_ident()

        def report(task_id: str, percent: int, message: str) -> None:
            frame = pipe.Progress(task_id, int(percent), str(message))
            if threading.get_ident() == loop_thread:
                self.send(frame)  # in order, before this job's JobDone
            else:
                loop.call_soon_threadsafe(self.send, frame)

        return report

    async def _run(self, msg: pipe.RunJob, sig: CancelSignal) -> None:
        job = pipe.job_from_msg(msg)
        token = current_task_id.set(msg.job_id)
        started = time.perf_counter()
        try:
            sink = self._sink or self._progress_sink()  # built by the first job
            begun = begin_async(self.registry, job, sig, sink)  # invoke_async, inlined
            outcomes = begun if isinstance(begun, list) else await begun
        except BaseException as exc:  # isolation point: the job must still be answered
            log.exception("job %s failed outside its handler", msg.job_id)
            outcomes = [Outcome(OutcomeKind.RETRY, error_msg=f"{type(exc).__name__}: {exc}")] * len(job.tasks)
        finally:
            current_task_id.reset(token)
            if self.signals.get(msg.job_id) is sig:
                del self.signals[msg.job_id]
        duration = time.perf_counter() - started
        if STORE.dirty:  # what the handler recorded arrives before its JobDone (one set check otherwise)
            self.ship_metrics()
        # At the turn's end, with the other JobDones of this turn: one write (and one wake-up of
        # the supervisor) per turn instead of one for the first job and one for the rest. Nothing
        # waits on it in between: the supervisor's latency path is RunJob -> handler start.
        done = pipe.JobDone(msg.job_id, [pipe.outcome_to_msg(o) for o in outcomes], duration)
        self.send(done, soon=True)


class _TaskIdFilter(logging.Filter):
    def __init__(self, child: str) -> None:
        super().__init__()
        self.child = child

    def filter(self, record: logging.LogRecord) -> bool:
        record.child = self.child
        if not getattr(record, "task_id", ""):
            record.task_id = current_task_id.get()
        return True


def _setup_logging(index: str, fmt: str, level: str = "info", forward: bool = False) -> tuple[Any, Any]:
    """Log to the real stderr (framed when the supervisor forwards it); ``print`` becomes records too."""
    from conveyor_sdk._runtime.logs import configure_logging, parse_level
    from conveyor_sdk._runtime.output import capture_print

    real_out, real_err = sys.__stdout__, sys.__stderr__
    tag = f"{index}:{os.getpid()}"
    configure_logging(fmt, child=tag, level=parse_level(level), stream=real_err, marked=forward)
    for handler in logging.getLogger().handlers:
        handler.addFilter(_TaskIdFilter(tag))
    return capture_print(real_out, real_err)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="conveyor-child")
    parser.add_argument("--app", required=True)
    parser.add_argument("--rfd", type=int, required=True)
    parser.add_argument("--wfd", type=int, required=True)
    parser.add_argument("--capacity", type=int, default=1)
    parser.add_argument("--beat", type=float, default=1.0)
    parser.add_argument("--index", default="0")
    parser.add_argument("--log-format", default="text")
    parser.add_argument("--parent", type=int, default=0)
    parser.add_argument("--log-level", default="info")
    parser.add_argument("--code-root", default="")
    parser.add_argument("--forward-output", action="store_true")
    parser.add_argument("--loop", default="auto", choices=eventloop.LOOPS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run one child; returns its exit code."""
    set_parent_death_signal()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    args = _parse(argv)
    if args.parent and os.getppid() != args.parent:
        return 0  # the supervisor died before PR_SET_PDEATHSIG took effect
    streams = _setup_logging(args.index, args.log_format, args.log_level, args.forward_output)
    if args.code_root:
        sys.path.insert(0, args.code_root)  # the last good copy of the app's code (see reload.py)
    try:
        registry = load_app(args.app)
    except AppLoadError as exc:
        with os.fdopen(args.wfd, "wb", 0) as out:
            out.write(pipe.encode(pipe.ImportFailed(exc.message, exc.detail)))
        return exc.exit_code
    child = ChildLoop(registry, args.rfd, args.wfd, capacity=max(1, args.capacity), beat=args.beat)
    try:
        eventloop.run(child.serve(), args.loop)
    finally:
        for stream in streams:
            stream.close_line()
    return 0


if __name__ == "__main__":
    sys.exit(main())
