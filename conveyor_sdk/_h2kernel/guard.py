"""An h2 frame buffer that refuses oversized and useless frames before it buffers them.

h2's own ``FrameBuffer`` waits until a whole frame has arrived before it checks
the length against SETTINGS_MAX_FRAME_SIZE, so a header announcing 16 MiB makes
it buffer 16 MiB. This one checks the 9-byte header as soon as it is there,
caps the bytes of a header block (HEADERS + CONTINUATION) and counts
consecutive empty DATA/CONTINUATION frames. Errors are h2 ``ProtocolError``
subclasses, so ``H2Connection.receive_data`` sends the GOAWAY with their code.

It also parses at most ``budget`` units of work per ``receive_data`` call (a
frame costs 1; a HEADERS/CONTINUATION/PUSH_PROMISE frame, which means HPACK
decoding, costs 8) and sets ``throttled`` when more complete frames wait: a read
full of tiny frames (each costs h2 a parse, and a header block an HPACK decode) is
then processed over several event-loop turns, so other connections are served
in between.

That buffer (:class:`GuardedFrameBuffer`, the fast path) hooks h2's private frame-buffer internals.
:class:`PublicGuardBuffer` (the public path) keeps the same rules through the buffer's public
protocol (``add_data`` and iteration): it follows frame headers itself (:class:`.walker.FrameWalker`)
as bytes arrive. It counts a header block by its frames' lengths (padding included, so a padded
block meets the cap up to 256 bytes per frame earlier) and a padded empty DATA frame as empty, as
the fast path does.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

import h2.errors
import h2.exceptions
from h2.frame_buffer import FrameBuffer
from hyperframe.frame import ContinuationFrame, DataFrame, HeadersFrame

from conveyor_sdk._h2kernel.walker import FrameWalker

__all__ = [
    "FRAMES_PER_TURN",
    "HEADER_COST",
    "EnhanceYourCalm",
    "GuardedFrameBuffer",
    "HeaderBlockTooLarge",
    "PublicGuardBuffer",
]

FRAMES_PER_TURN = 128  # work units parsed per event-loop turn (a few ms of h2 work at most)
HEADER_COST = 8
_HEADER_TYPES = frozenset({0x1, 0x5, 0x9})  # HEADERS, PUSH_PROMISE, CONTINUATION


class EnhanceYourCalm(h2.exceptions.ProtocolError):
    """The peer is flooding us with frames that cost work and carry nothing."""

    error_code = h2.errors.ErrorCodes.ENHANCE_YOUR_CALM


class HeaderBlockTooLarge(h2.exceptions.ProtocolError):
    """A header block is larger than the server accepts (HPACK state is lost with it)."""

    error_code = h2.errors.ErrorCodes.PROTOCOL_ERROR


class GuardedFrameBuffer(FrameBuffer):
    """``FrameBuffer`` with early length checks, a header-block cap and an empty-frame budget."""

    def __init__(self, *, max_header_bytes: int, max_empty_frames: int) -> None:
        super().__init__(server=True)
        self.max_header_bytes = max_header_bytes
        self.max_empty_frames = max_empty_frames
        self.empty_frames = 0
        self.budget = FRAMES_PER_TURN
        self.throttled = False
        self._block_bytes = 0

    def __next__(self) -> Any:
        data = self._data
        if len(data) < 9:
            raise StopIteration
        length = int.from_bytes(data[:3], "big")
        if length > self.max_frame_size:
            raise h2.exceptions.FrameTooLargeError(
                f"frame of {length} bytes announced, max {self.max_frame_size}"
            )
        if self.budget <= 0:
            self.throttled = len(data) >= 9 + length  # a whole frame is waiting for the next turn
            raise StopIteration
        self.budget -= HEADER_COST if data[3] in _HEADER_TYPES else 1
        return super().__next__()

    def _update_header_buffer(self, f: Any) -> Any:
        if isinstance(f, DataFrame):
            self._count_empty(not f.data and "END_STREAM" not in f.flags)
        elif isinstance(f, HeadersFrame | ContinuationFrame):
            if isinstance(f, ContinuationFrame):
                self._count_empty(not f.data)
            self._block_bytes += len(f.data)
            if self._block_bytes > self.max_header_bytes:
                raise HeaderBlockTooLarge(f"header block larger than {self.max_header_bytes} bytes")
            if "END_HEADERS" in f.flags:
                self._block_bytes = 0
        return super()._update_header_buffer(f)

    def _count_empty(self, empty: bool) -> None:
        if not empty:
            self.empty_frames = 0
            return
        self.empty_frames += 1
        if self.empty_frames > self.max_empty_frames:
            raise EnhanceYourCalm(f"more than {self.max_empty_frames} consecutive empty frames")


_PREFACE = 24  # b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_DATA, _CONTINUATION = 0x0, 0x9
_END_STREAM, _END_HEADERS = 0x1, 0x4


class PublicGuardBuffer(FrameBuffer):
    """:class:`GuardedFrameBuffer`'s rules through ``FrameBuffer``'s public protocol only.

    ``before(type, stream id)`` is called as each frame is handed to h2 (the refusing rule of
    :class:`.server_conn.RefusingConnection` on this path).
    """

    def __init__(
        self, *, max_header_bytes: int, max_empty_frames: int, before: Callable[[int, int], None]
    ) -> None:
        super().__init__(server=True)
        self.max_header_bytes = max_header_bytes
        self.max_empty_frames = max_empty_frames
        self.empty_frames = 0
        self.budget = FRAMES_PER_TURN
        self.throttled = False
        self._block_bytes = 0
        self._before = before
        self._complete: deque[tuple[int, int, int, int]] = deque()  # whole frames h2 has not taken
        self._walker = FrameWalker(preamble=_PREFACE)

    def _check_length(self, length: int) -> None:
        if length > self.max_frame_size:
            raise h2.exceptions.FrameTooLargeError(
                f"frame of {length} bytes announced, max {self.max_frame_size}"
            )

    def add_data(self, data: Any) -> None:
        super().add_data(data)  # checks the preface
        for _end, *frame in self._walker.feed(data):
            self._complete.append(tuple(frame))  # type: ignore[arg-type]

    def __next__(self) -> Any:
        if not self._complete:
            partial = self._walker.current
            if partial is not None:
                self._check_length(partial[3])  # as soon as its header is there, not once it all is
            raise StopIteration
        self._check_length(self._complete[0][3])
        if self.budget <= 0:
            self.throttled = True  # a whole frame is waiting for the next turn
            raise StopIteration
        kind, flags, stream_id, length = self._complete.popleft()
        self.budget -= HEADER_COST if kind in _HEADER_TYPES else 1
        if kind in _HEADER_TYPES:
            if kind == _CONTINUATION:
                self._count_empty(not length)
            self._block_bytes += length
            if self._block_bytes > self.max_header_bytes:
                raise HeaderBlockTooLarge(f"header block larger than {self.max_header_bytes} bytes")
            if flags & _END_HEADERS:
                self._block_bytes = 0
        self._before(kind, stream_id)
        frame: Any = super().__next__()
        if kind == _DATA:
            self._count_empty(not frame.data and "END_STREAM" not in frame.flags)
        return frame

    def _count_empty(self, empty: bool) -> None:
        if not empty:
            self.empty_frames = 0
            return
        self.empty_frames += 1
        if self.empty_frames > self.max_empty_frames:
            raise EnhanceYourCalm(f"more than {self.max_empty_frames} consecutive empty frames")
