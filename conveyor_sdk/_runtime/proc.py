"""One child process as the supervisor sees it: spawn, pipes, exit detection, kill.

Children are started with :mod:`subprocess` (fork + exec of a fresh interpreter,
never a bare fork), each in its own process group (so a hard kill takes any
grandchildren with it and the terminal's Ctrl-C never reaches them). The two
pipes are plain fds passed with ``pass_fds``. Exit is detected with a pidfd
where the kernel has one (else by polling); a child counts as gone once it has
exited AND its pipe has been drained, so a final ``JobDone`` is never lost.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import enum
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from conveyor_sdk._runtime import pipe
from conveyor_sdk._runtime.outbox import Outbox
from conveyor_sdk._runtime.output import ChildOutput, write_output
from conveyor_sdk._transport.clock import Timer
from conveyor_sdk._worker.executor import CancelReason, Job, JobControl, Outcome
from conveyor_sdk.errors import ProtocolError

__all__ = ["ChildArgs", "ChildProc", "ChildState", "RunningJob", "describe_exit"]

log = logging.getLogger("conveyor.runtime")


class ChildState(enum.Enum):
    """Where a child is in its life."""

    STARTING = "starting"
    READY = "ready"
    RETIRING = "retiring"  # takes no new jobs; exits once its jobs are done
    DEAD = "dead"


@dataclass(frozen=True, slots=True)
class ChildArgs:
    """How to start children."""

    app: str
    capacity: int
    beat: float = 1.0
    log_format: str = "text"
    python: str = sys.executable
    env: dict[str, str] | None = None
    cwd: str | None = None
    forward_stderr: bool = False  # pipe children's stderr through the supervisor's sys.stderr (live view)
    log_level: str = "info"
    source_root: str = ""  # the app's folder; its .py files are copied as the last good code
    import_root: str = ""  # a folder put first on the child's sys.path (a last-good-code copy)
    loop: str = "auto"  # the child's event loop (see eventloop.py)


@dataclass(slots=True)
class RunningJob:
    """A job handed to a child and not answered yet."""

    job: Job
    control: JobControl
    child: ChildProc
    future: asyncio.Future[list[Outcome]]
    started: float
    cancel_reason: CancelReason | None = None
    kill_timer: Timer | None = None
    victim: bool = False  # its child is being killed because of this job
    started_wall: float = 0.0  # epoch seconds
    forget: Callable[[asyncio.Future[list[Outcome]]], None] | None = None  # the future's done callback


def describe_exit(returncode: int | None) -> str:
    """``"SIGKILL"`` for -9, ``"exit code 3"`` for 3."""
    if returncode is None:
        return "unknown exit"
    if returncode < 0:
        try:
            return signal.Signals(-returncode).name
        except ValueError:
            return f"signal {-returncode}"
    return f"exit code {returncode}"


@dataclass(eq=False)
class ChildProc:
    """A child process plus its pipes and the jobs it runs."""

    index: int
    pool: str
    generation: int
    args: ChildArgs
    state: ChildState = ChildState.STARTING
    popen: subprocess.Popen[bytes] | None = None
    jobs: dict[str, RunningJob] = field(default_factory=dict)
    tasks_done: int = 0
    rss: int = 0
    last_beat: float = 0.0
    started_at: float = 0.0
    ready_at: float = 0.0
    types: frozenset[str] = frozenset()
    sync_types: frozenset[str] = frozenset()
    returncode: int | None = None
    kill_note: str = ""  # why the supervisor killed it ("" = it died on its own)
    hung_logged: bool = False
    recycle_at: int = 0  # tasks_done threshold (with jitter); 0 = never
    purpose: str = "start"  # start | respawn | reload | recycle
    retired: bool = False  # told to stop; its replacement already exists
    load_error: str = ""  # ImportFailed message, when the child could not load the app
    load_detail: str = ""  # ... and its traceback (user frames)
    _rfd: int = -1  # parent end: child -> supervisor
    _wfd: int = -1  # parent end: supervisor -> child
    _child_fds: tuple[int, int] = (-1, -1)
    _writer: asyncio.WriteTransport | None = None
    _reader: asyncio.ReadTransport | None = None
    _outbox: Outbox = field(init=False, repr=False)
    _stderr: asyncio.ReadTransport | None = None
    _pidfd: int = -1
    _pipe_closed: bool = False
    _exited: bool = False
    _gone: bool = False
    _on_message: Callable[[ChildProc, pipe.PipeMessage], None] | None = None
    _on_gone: Callable[[ChildProc], None] | None = None
    ready: asyncio.Event | None = None
    gone: asyncio.Event = field(default_factory=asyncio.Event)
    output_closed: asyncio.Event = field(default_factory=asyncio.Event)  # its output pipe reached EOF

    def __post_init__(self) -> None:
        self._outbox = Outbox(lambda: self._writer)

    @property
    def pid(self) -> int:
        return self.popen.pid if self.popen is not None else 0

    @property
    def name(self) -> str:
        return f"{self.pool}-{self.index}"

    @property
    def free(self) -> int:
        """Free job slots (0 unless READY)."""
        if self.state is not ChildState.READY:
            return 0
        return max(0, self.args.capacity - len(self.jobs))

    def spawn(self, now: float | None = None) -> None:
        """Start the process (synchronous; safe before any loop or thread exists)."""
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        cmd = [
            self.args.python, "-m", "conveyor_sdk._runtime.child",
            "--app", self.args.app,
            "--rfd", str(to_child_r), "--wfd", str(from_child_w),
            "--capacity", str(self.args.capacity),
            "--beat", str(self.args.beat),
            "--index", self.name,
            "--log-format", self.args.log_format,
            "--parent", str(os.getpid()),
            "--log-level", self.args.log_level,
            "--loop", self.args.loop,
        ]  # fmt: skip
        if self.args.forward_stderr:
            cmd.append("--forward-output")
        if self.args.import_root:
            cmd += ["--code-root", self.args.import_root]
        env = dict(os.environ if self.args.env is None else self.args.env)
        env.setdefault("PYTHONUNBUFFERED", "1")
        try:
            self.popen = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                pass_fds=(to_child_r, from_child_w),
                process_group=0,
                # live view: fds 1 and 2 are one pipe the supervisor prints above the table (output.py)
                stdout=subprocess.PIPE if self.args.forward_stderr else None,
                stderr=subprocess.STDOUT if self.args.forward_stderr else None,
                env=env,
                cwd=self.args.cwd,
            )
        finally:
            os.close(to_child_r)
            os.close(from_child_w)
        self._rfd, self._wfd = from_child_r, to_child_w
        self.started_at = time.monotonic() if now is None else now  # ``now``: the fleet's clock
        self.last_beat = self.started_at

    async def attach(
        self,
        on_message: Callable[[ChildProc, pipe.PipeMessage], None],
        on_gone: Callable[[ChildProc], None],
    ) -> None:
        """Connect the pipes and exit watch to the running loop."""
        loop = asyncio.get_running_loop()
        self._on_message, self._on_gone = on_message, on_gone
        self.ready = asyncio.Event()
        self._writer, _ = await loop.connect_write_pipe(asyncio.Protocol, os.fdopen(self._wfd, "wb", 0))
        self._reader, _ = await loop.connect_read_pipe(
            lambda: _ChildReader(self), os.fdopen(self._rfd, "rb", 0)
        )
        if self.popen is not None and self.popen.stdout is not None:
            out = self.popen.stdout
            self._stderr, _ = await loop.connect_read_pipe(lambda: _OutputReader(self), out)
        try:
            self._pidfd = os.pidfd_open(self.pid)
            loop.add_reader(self._pidfd, self._on_pidfd)
        except (AttributeError, OSError):
            self._pidfd = -1  # no pidfd: the supervisor's tick polls instead

    def send(self, message: pipe.PipeMessage, *, soon: bool = False) -> None:
        """Send a frame (see :class:`Outbox`: the first of a loop turn leaves at once, unless ``soon``)."""
        if self._writer is not None and not self._writer.is_closing():
            self._outbox.send(pipe.encode(message), soon=soon)

    def kill(self, note: str) -> None:
        """SIGKILL the child's whole process group."""
        if not self.kill_note:
            self.kill_note = note
        if self.popen is None or self._exited:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, signal.SIGKILL)

    def poll(self) -> None:
        """Exit check for platforms without pidfd (called from the supervisor's tick)."""
        if not self._exited and self.popen is not None and self.popen.poll() is not None:
            self._mark_exited()

    # -- internal ------------------------------------------------------------------
    def _on_pidfd(self) -> None:
        self._mark_exited()

    def _mark_exited(self) -> None:
        if self._exited or self.popen is None:
            return
        self._exited = True
        self.returncode = self.popen.wait()
        if self._pidfd >= 0:
            loop = asyncio.get_running_loop()
            loop.remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = -1
        if self._pipe_closed:
            self._finish()
        else:  # give the reader a moment to drain frames still in the pipe
            asyncio.get_running_loop().call_later(1.0, self._finish)

    def pipe_closed(self) -> None:
        self._pipe_closed = True
        if self._exited:
            self._finish()
        elif self.popen is not None:
            # Pipe gone but process alive (it closed its fds?): it is useless now.
            self.kill(self.kill_note or "closed its pipe")

    def _finish(self) -> None:
        if self._gone:
            return
        self._gone = True
        self.state = ChildState.DEAD
        self.gone.set()
        if self._writer is not None:
            self._writer.close()
        if self._reader is not None:
            self._reader.close()
        # The output pipe closes itself at end of file (after its last line is printed).
        if self._on_gone is not None:
            self._on_gone(self)

    async def output_drained(self, seconds: float) -> None:
        """Wait (bounded) until the output pipe is read to its end, then close it."""
        if self._stderr is None:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.output_closed.wait(), seconds)
        self._stderr.close()

    def deliver(self, message: pipe.PipeMessage) -> None:
        if self._on_message is not None:
            self._on_message(self, message)


class _ChildReader(asyncio.Protocol):
    def __init__(self, child: ChildProc) -> None:
        self.child = child
        self.frames = pipe.FrameReader()

    def data_received(self, data: bytes) -> None:
        try:
            messages = self.frames.feed(data)
        except ProtocolError as exc:
            log.error("child %s sent garbage on its pipe (%s); killing it", self.child.name, exc)
            self.child.kill("pipe protocol error")
            return
        for message in messages:
            self.child.deliver(message)

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.child.pipe_closed()


class _OutputReader(asyncio.Protocol):
    """Prints a child's output (fds 1 and 2) line by line above the live view (``output.py``)."""

    def __init__(self, child: ChildProc) -> None:
        self.lines = ChildOutput(f"{child.name}:{child.pid}")
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.child = child

    def data_received(self, data: bytes) -> None:
        for line in self.lines.feed(self.decoder.decode(data)):
            write_output(line)

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        for line in self.lines.feed(self.decoder.decode(b"", final=True)) + self.lines.close():
            write_output(line)
        self.child.output_closed.set()
