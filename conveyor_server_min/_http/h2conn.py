"""HTTP/2 server connection: h2 state machine + per-stream queues + one handler task per stream.

Rules this module keeps:

* **Flow control both ways.** Outbound bytes wait in a per-stream buffer and
  leave only within the peer's stream and connection windows; a WINDOW_UPDATE
  or SETTINGS change triggers a flush. Inbound bytes are acknowledged when the
  handler consumes them, so one slow handler holds back only its own stream
  (the connection window is opened to the maximum at start).
* **No stream blocks another.** Flushes walk every stream with pending bytes;
  a writer waits only on its own buffer (``HIGH_WATER``) or on the socket.
* **Refused, not fatal.** Streams beyond SETTINGS_MAX_CONCURRENT_STREAMS get
  RST_STREAM(REFUSED_STREAM); the connection lives on.
* **Graceful shutdown.** ``shutdown()`` refuses new streams (REFUSED_STREAM),
  lets the open ones finish, then sends GOAWAY(NO_ERROR) and closes.
* **Bounded by one client** (:class:`HttpLimits`): frames are size-checked from
  their header (``conveyor_sdk._h2kernel.guard``); a stream reset in the same read that opened it
  never starts a handler, and its memory goes at once; RST_STREAM floods and
  empty-frame floods end in GOAWAY(ENHANCE_YOUR_CALM); reading stops while
  writes are paused and pending output is capped; a connection without streams
  for ``idle_timeout`` gets GOAWAY(NO_ERROR).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine
from typing import Any

import h2.errors
import h2.events
import h2.exceptions

from conveyor_sdk._h2kernel import probe
from conveyor_sdk._h2kernel.guard import FRAMES_PER_TURN
from conveyor_sdk._h2kernel.server import open_taken, take_frames, take_unary
from conveyor_sdk._h2kernel.server_conn import acknowledge, new_server_h2, release, send_data, send_unary
from conveyor_sdk._h2kernel.streams import retire_closed

from .h2stream import BODY_BUDGET, HIGH_WATER, H2Stream, header_dict
from .inline import start_inline
from .limits import Deadline, FloodCounters, HttpLimits, WindowCounter, close_soon
from .rpc import Router

__all__ = ["HIGH_WATER", "H2Connection"]

log = logging.getLogger("conveyor.server.http")

STREAM_WINDOW = 1 << 20  # what each client stream may send before we acknowledge
LINGER = 1.0  # seconds a half-closed connection discards late frames before closing (as Go)
LINGER_BYTES = 64 * 1024  # ... or until it has discarded this much
_MAX_WINDOW = 2**31 - 1


class H2Connection:
    """Serves one HTTP/2 connection on an asyncio transport."""

    def __init__(
        self,
        transport: asyncio.Transport,
        router: Router,
        peer: str,
        *,
        limits: HttpLimits | None = None,
        floods: FloodCounters | None = None,
    ) -> None:
        self.transport = transport
        self.router = router
        self.peer = peer
        self.limits = limits = limits or HttpLimits()
        self.h2, self._frames = new_server_h2(
            max_streams=limits.max_streams,
            stream_window=STREAM_WINDOW,
            max_header_bytes=limits.max_header_bytes,
            max_empty_frames=limits.max_empty_frames,
        )
        self._next_turn = False  # frames are waiting in the buffer for the next loop turn
        self._linger_left = LINGER_BYTES
        self._fields: dict[object, tuple[str, str]] = {}  # see header_dict
        # The last header list the kernel's decoder gave a taken request and its header_dict: a
        # client repeats its header block, and the decoder hands back the same list object for it.
        self._raw_headers: object = None
        self._headers: dict[str, str] = {}
        # Shared by the client's connections (see Hub.floods_for): reconnecting does not refill them.
        floods = floods or FloodCounters.new(limits)
        self._resets, self._pings = floods.resets, floods.pings
        self._starting: list[H2Stream] = []
        self._idle_timer = Deadline(self._on_idle)
        self.streams: dict[int, H2Stream] = {}
        self.held_bytes = 0  # see h2stream.BODY_BUDGET
        self.tasks: set[asyncio.Task[None]] = set()
        self._ready: dict[int, H2Stream] = {}
        self._flush_scheduled = False
        self._write_paused = False
        self._closed = False
        self._draining = False
        self._idle: asyncio.Event | None = None  # made by wait_idle, set when no stream is left

    def __repr__(self) -> str:
        return f"H2Connection(peer={self.peer!r}, streams={len(self.streams)}, closed={self._closed})"

    # ---- transport events ---------------------------------------------------------------------
    def start(self, initial: bytes) -> None:
        """Send our preface and process the bytes already sniffed."""
        self.h2.initiate_connection()
        self.h2.increment_flow_control_window(_MAX_WINDOW - 65535)
        self._write_out()
        self._idle_timer.set(self.limits.idle_timeout)
        if initial:
            self.data_received(initial)

    def data_received(self, data: bytes) -> None:
        if self._closed:
            self._linger_left -= len(data)
            if self._linger_left < 0:
                self.transport.close()  # a peer still pushing data after GOAWAY gets no more reads
            return
        frames = self._frames
        frames.budget, frames.throttled = FRAMES_PER_TURN, False
        parsed = self._parse(data)
        if parsed is None:
            return
        events, taken = parsed
        if taken is not None:
            self._serve_taken(*taken)
        for event in events:
            if self._closed:
                break
            self._on_event(event)
        if self._starting:
            self._start_handlers()
        self._write_out()
        if len(self.h2.streams) > len(self.streams) and not self._closed:
            retire_closed(self.h2)  # after the write: the dispatch of an inline Enqueue has left already
        if frames.throttled and not self._closed and not self._next_turn:
            self._next_turn = True  # more frames wait: parse them on a later turn, read nothing new
            self.transport.pause_reading()
            asyncio.get_running_loop().call_soon(self._continue_frames)

    def _parse(self, data: bytes) -> tuple[list[h2.events.Event], tuple[int, Any, bytes] | None] | None:
        """The read's events, or the whole unary request it is (the kernel's ``take_unary``); None
        when it ended the connection."""
        try:
            if type(data) is not bytes:
                return self.h2.receive_data(data), None
            if not self._draining and (taken := take_unary(self.h2, self._frames, data)) is not None:
                return [], taken
            events, used = take_frames(self.h2, self._frames, data)
            if used < len(data) or not used:
                events += self.h2.receive_data(data[used:] if used else data)
        except h2.exceptions.ProtocolError as exc:
            log.debug("HTTP/2 protocol error from %s: %s", self.peer, exc)
            self._write_out()  # h2 has queued the GOAWAY
            self._finish(True)
            return None
        except Exception as exc:  # h2 raises ProtocolError for any bad input: anything else is ours
            log.error("closing the connection from %s: %s", self.peer, probe.internal_error(exc).message)
            self.close(h2.errors.ErrorCodes.INTERNAL_ERROR, linger=True)
            return None
        return events, None

    def _continue_frames(self) -> None:
        self._next_turn = False
        self.data_received(b"")
        if not self._next_turn and not self._closed and not self._write_paused:
            self.transport.resume_reading()

    def _start_handlers(self) -> None:
        """Start a handler for each stream opened by this read that is still alive.

        Deferred to the end of the read so that HEADERS + RST_STREAM arriving
        together (rapid reset) cost no task at all.
        """
        starting, self._starting = self._starting, []
        if self._closed:
            return
        loop = asyncio.get_running_loop()
        for st in starting:
            if st.reset or st.id not in self.streams or self._closed:
                continue
            if st.ended_in and self.router.runs_inline(st):
                # A complete unary request: its first step now, a task only if it has to wait.
                task = start_inline(self._run(st), f"h2-stream-{st.id}")
                if task is None:
                    self._stream_done(st, write=False)  # data_received writes at its end
                    continue
            else:
                task = loop.create_task(self._run(st), name=f"h2-stream-{st.id}")
            st.task = task
            self.tasks.add(task)
            task.add_done_callback(lambda _t, st=st: self._stream_done(st))  # runs even if never started

    def _serve_taken(self, sid: int, raw: list[tuple[bytes, bytes]], body: bytes) -> None:
        """A whole unary request the kernel took without an h2 stream (``take_unary``): its handler's
        first step runs now. h2 gets the stream (``open_taken``) before anything but the kernel's
        one-step answer (``send_unary``) touches it, and at the latest before this read ends."""
        if raw is self._raw_headers:
            headers = self._headers  # the same block as last time (handlers only read headers)
        else:
            headers = header_dict(raw, self._fields)
            self._raw_headers, self._headers = raw, headers
        st = H2Stream(self, sid, headers)
        st.ended_in = True
        st.taken = (raw, body)
        self.streams[sid] = st
        if self.router.runs_inline(st) and self.held_bytes + len(body) <= BODY_BUDGET:
            # The unary handler takes the body whole: read and counted here, as read_chunk would.
            st.held = len(body)
            self.held_bytes += len(body)
            self.ack(sid, len(body))
            rest = self.router.serve_whole(st, body)
            task = None if rest is None else start_inline(self._run(st, rest), f"h2-stream-{sid}")
        else:
            st.chunks.append((body, len(body)))  # read by the handler (or refused by read_chunk)
            task = asyncio.get_running_loop().create_task(self._run(st), name=f"h2-stream-{sid}")
        if task is None:
            self._stream_done(st, write=False)  # data_received writes at its end
        else:
            st.task = task
            self.tasks.add(task)
            task.add_done_callback(lambda _t, st=st: self._stream_done(st))
        if st.taken is not None and not self._closed:
            self._open_taken(st)  # still unanswered: later frames on it must find h2's stream

    def _open_taken(self, st: H2Stream) -> None:
        raw, body = st.taken  # type: ignore[misc]
        st.taken = None
        open_taken(self.h2, st.id, raw, body)

    def _on_event(self, event: h2.events.Event) -> None:
        if isinstance(event, h2.events.DataReceived):
            self._on_data(event)
        elif isinstance(event, h2.events.RequestReceived):
            self._on_request(event)
        elif isinstance(event, h2.events.StreamEnded):
            st = self.streams.get(event.stream_id)
            if st is not None:
                st.ended_in = True
                st.wake_reader()
        elif isinstance(event, h2.events.StreamReset):
            self._on_reset(event.stream_id)
        elif isinstance(event, h2.events.WindowUpdated | h2.events.RemoteSettingsChanged):
            self._schedule_flush()
        elif isinstance(event, h2.events.ConnectionTerminated):
            self._write_out()
            self.abort()
        elif isinstance(event, h2.events.PingReceived) and self._pings.hit(asyncio.get_running_loop().time()):
            self._calm_down("PING frames", self._pings)

    def _on_request(self, event: h2.events.RequestReceived) -> None:
        sid = event.stream_id
        if self._draining:
            with contextlib.suppress(h2.exceptions.H2Error):  # the client may have reset it already
                self.h2.reset_stream(sid, h2.errors.ErrorCodes.REFUSED_STREAM)
            return
        headers = header_dict(event.headers or (), self._fields)
        st = H2Stream(self, sid, headers)
        self.streams[sid] = st
        self._starting.append(st)

    def _on_data(self, event: h2.events.DataReceived) -> None:
        st = self.streams.get(event.stream_id)
        flow = event.flow_controlled_length or 0
        if st is None or st.finished or st.reset:
            if flow:
                self.ack(event.stream_id, flow)
            return
        st.chunks.append((event.data or b"", flow))
        st.wake_reader()

    def _on_reset(self, stream_id: int) -> None:
        if self._resets.hit(asyncio.get_running_loop().time()):
            self._calm_down("stream resets", self._resets)
            return
        st = self.streams.get(stream_id)
        if st is None:
            return
        self._kill(st)

    def _calm_down(self, what: str, counter: WindowCounter) -> None:
        args = (self.peer, counter.limit, what, counter.window)
        log.warning("%s sent more than %d %s in %gs; closing (ENHANCE_YOUR_CALM)", *args)
        self.close(h2.errors.ErrorCodes.ENHANCE_YOUR_CALM, linger=True)

    def _kill(self, st: H2Stream) -> None:
        st.reset = True
        st.out.clear()
        self._ready.pop(st.id, None)
        st.wake_reader()
        st.wake_writer()
        if st.task is not None and not st.task.done():
            st.task.cancel()  # its _stream_done forgets the stream
        elif st.id in self.streams:
            self._forget(st)  # reset while only unsent response bytes were left

    async def _run(self, st: H2Stream, work: Coroutine[Any, Any, None] | None = None) -> None:
        """Serve ``st`` (``work``: what :meth:`Router.serve_whole` left of it)."""
        try:
            await (self.router.handle(st) if work is None else work)
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("unhandled error serving %s", st.path)

    def _stream_done(self, st: H2Stream, *, write: bool = True) -> None:
        task = st.task
        if task is not None:
            self.tasks.discard(task)
        if not st.finished and not st.reset and not self._closed:
            # The handler ended without a response: never leave the client hanging.
            self._reset_stream(st, h2.errors.ErrorCodes.INTERNAL_ERROR)
        if st.reset or (st.finished and not st.end_pending):
            self._forget(st)
        elif st.end_pending and st.id in self._ready and not self._write_paused and not self._closed:
            self._flush_stream(st)  # the whole response is there: send it with its headers
        if write:
            self._write_out()

    def _forget(self, st: H2Stream) -> None:
        self.streams.pop(st.id, None)
        if st.held != -1:  # -1: released when it answered
            st.release()
        if st.chunks:
            for _, flow in st.chunks:
                if flow:
                    self.ack(st.id, flow)
            st.chunks.clear()
        if not self.streams:
            if self._idle is not None:
                self._wake_idle()
            self._idle_timer.set(self.limits.idle_timeout)
            if self._draining:
                self.close()

    def _reset_stream(self, st: H2Stream, code: h2.errors.ErrorCodes) -> None:
        if st.taken is not None and not self._closed:
            self._open_taken(st)
        with contextlib.suppress(h2.exceptions.H2Error):
            self.h2.reset_stream(st.id, code)
        self._kill(st)

    # ---- sending --------------------------------------------------------------------------------
    def ack(self, stream_id: int, flow: int) -> None:
        """Hand ``flow`` consumed bytes back to the peer's windows."""
        if flow and not self._closed:
            try:
                queued = acknowledge(self.h2, stream_id, flow)
            except h2.exceptions.H2Error:
                return
            if queued:  # a WINDOW_UPDATE: h2 sends one only now and then
                self._schedule_flush()

    def send_headers(self, st: H2Stream, headers: list[tuple[str, str]], end: bool) -> None:
        if self._closed:
            return
        if st.taken is not None:
            self._open_taken(st)
        try:
            self.h2.send_headers(st.id, headers, end_stream=end)
        except h2.exceptions.H2Error:
            self._kill(st)
            return
        if end:
            self._maybe_rst_after_response(st)
            self._schedule_flush()
        else:
            self._schedule_flush()

    def send_whole(self, st: H2Stream, content_type: str, body: bytes) -> bool:
        """A unary 200 answer in one step (the kernel's send_unary); the stream's end
        (``_stream_done``, right after the handler returns) writes it out."""
        if self._closed or not send_unary(self.h2, st.id, content_type, body):
            return False
        st.taken = None  # answered: the kernel recorded the stream as h2 records a closed one
        return True

    def mark_ready(self, st: H2Stream) -> None:
        self._ready[st.id] = st
        self._schedule_flush()

    def flush_now(self, st: H2Stream) -> None:
        """Write ``st``'s bytes at once unless a flush is already due this turn (then join it).

        At most one immediate write per connection per event-loop turn: later writes of the
        same turn batch into the scheduled flush.
        """
        if self._flush_scheduled or self._write_paused or self._closed:
            self.mark_ready(st)
            return
        self._flush_stream(st)
        self._write_out()
        if st.out:
            self._ready[st.id] = st
        self._schedule_flush()

    def _schedule_flush(self) -> None:
        if not self._flush_scheduled and not self._closed:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self._closed:
            return
        if not self._write_paused:
            for st in list(self._ready.values()):
                self._flush_stream(st)
        self._write_out()

    def _flush_stream(self, st: H2Stream) -> None:
        if st.taken is not None:
            self._open_taken(st)
        conn = self.h2
        out = st.out
        try:
            while out:
                size = min(conn.local_flow_control_window(st.id), conn.max_outbound_frame_size, len(out))
                if size <= 0:
                    break
                last = size == len(out) and st.end_pending and st.trailers is None
                send_data(conn, st.id, out[:size] if size < len(out) else out, last)
                del out[:size]
                if last:
                    st.end_pending = False
            if not out and st.end_pending:
                st.end_pending = False
                if st.trailers is not None:
                    conn.send_headers(st.id, st.trailers, end_stream=True)
                else:
                    conn.end_stream(st.id)
        except h2.exceptions.H2Error:
            self._kill(st)
            return
        if len(out) <= HIGH_WATER:
            st.wake_writer()
        if not out and not st.end_pending:
            self._ready.pop(st.id, None)
            if st.finished:
                self._maybe_rst_after_response(st)
                if st.task is None or st.task.done():
                    self._forget(st)

    def _maybe_rst_after_response(self, st: H2Stream) -> None:
        """Response complete but the client is still sending: tell it to stop (NO_ERROR)."""
        if not st.ended_in and not st.reset:
            with contextlib.suppress(h2.exceptions.H2Error):
                self.h2.reset_stream(st.id, h2.errors.ErrorCodes.NO_ERROR)
            st.reset = True
            st.wake_reader()

    def _write_out(self) -> None:
        if self._closed:
            return
        data = self.h2.data_to_send()
        if data:
            self.transport.write(data)
            if self._write_paused and self.transport.get_write_buffer_size() > self.limits.max_pending_output:
                log.warning("%s does not read its responses; dropping the connection", self.peer)
                self._closed = True
                self.transport.abort()  # close() would wait for the buffer to drain: it never will
                self._cancel_all()

    def pause_writing(self) -> None:
        """The socket buffer is full: stop sending stream data and stop reading (no new replies)."""
        self._write_paused = True
        if not self._closed:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        if not self._closed and not self._next_turn:
            self.transport.resume_reading()
        self._schedule_flush()

    def _on_idle(self) -> None:
        """No stream for ``idle_timeout``: GOAWAY(NO_ERROR) and close (re-armed when streams end)."""
        if not self._closed and not self.streams:
            log.debug("closing idle HTTP/2 connection from %s", self.peer)
            self.close(linger=True)

    # ---- lifecycle ----------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Graceful stop: refuse new streams, let open ones finish, then GOAWAY and close when idle.

        The GOAWAY goes out only once the open streams are done: some HTTP/2
        clients (python-h2) treat every frame after a GOAWAY as a connection
        error, which would swallow the sessions' final trailers.
        """
        if self._closed or self._draining:
            return
        self._draining = True
        if not self.streams:
            self.close()

    async def wait_idle(self) -> None:
        """Until no stream is open."""
        if self.streams:
            if self._idle is None:
                self._idle = asyncio.Event()
            await self._idle.wait()

    def _wake_idle(self) -> None:
        idle, self._idle = self._idle, None
        if idle is not None:
            idle.set()

    async def wait_handlers(self) -> None:
        """Until no stream handler task is running."""
        while self.tasks:
            await asyncio.wait(list(self.tasks))

    def close(
        self, code: h2.errors.ErrorCodes = h2.errors.ErrorCodes.NO_ERROR, *, linger: bool = False
    ) -> None:
        """Send a final GOAWAY and close the socket after writing what is buffered.

        ``linger`` (closes the server decides on: idle, abuse, protocol errors)
        half-closes first and discards what the peer still sends for up to
        ``LINGER`` seconds (``LINGER_BYTES`` at most), so the peer reads the
        GOAWAY and its reason instead of a TCP reset triggered by its own late
        frames.
        """
        if self._closed:
            if not linger:
                self.transport.close()  # e.g. server shutdown: end a lingering close now
            return
        with contextlib.suppress(h2.exceptions.H2Error):
            self.h2.close_connection(code)
        self._write_out()
        self._finish(linger)

    def abort(self) -> None:
        """Drop the connection now (peer gone or said GOAWAY)."""
        if not self._closed:
            self._finish(False)
        self._cancel_all()

    def _finish(self, linger: bool) -> None:
        self._closed = True
        transport = self.transport
        if linger and transport.can_write_eof():
            transport.write_eof()
            transport.resume_reading()  # see the peer's EOF; data_received discards the rest
            asyncio.get_running_loop().call_later(LINGER, transport.abort)
        else:
            close_soon(transport)
        self._cancel_all()

    def connection_lost(self) -> None:
        self._closed = True
        self._cancel_all()
        # h2's connection object is a reference cycle (its frame dispatch table holds bound
        # methods), so it waits for the cyclic GC: drop the large buffers it holds now.
        release(self._frames)
        self._idle_timer.close()

    def _cancel_all(self) -> None:
        self._idle_timer.cancel()
        self._starting.clear()
        for st in list(self.streams.values()):
            self._kill(st)
        self.streams.clear()
        self._ready.clear()
        self._wake_idle()
