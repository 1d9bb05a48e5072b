"""The transport seam (:class:`CallIO`) and how each wire format writes a response (:class:`Reply`).

An HTTP connection (HTTP/2 stream or HTTP/1.1 request) implements ``CallIO``;
the call layer never sees h2 or h11. ``Reply`` hides the four wire formats'
differences: where the status goes (HTTP status, trailers, a trailer frame or an
end-of-stream frame) and when Trailers-Only applies.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Protocol

from conveyor_sdk.errors import ConveyorError

from .wire import (
    Negotiated,
    Wire,
    connect_end_frame,
    connect_error_body,
    encode_message,
    grpc_trailers,
    grpc_web_trailer_frame,
)

__all__ = ["CallIO", "Reply", "plain_response"]


class CallIO(Protocol):
    """One HTTP request/response exchange, as the call layer sees it."""

    @property
    def method(self) -> str:
        """Request method, upper case."""

    @property
    def path(self) -> str:
        """Request path without the query string."""

    @property
    def query(self) -> str:
        """The query string (after ``?``; "" when none)."""

    @property
    def headers(self) -> Mapping[str, str]:
        """Request headers, lower-case names (repeated headers joined with ``, ``)."""

    @property
    def peer(self) -> str:
        """``host:port`` of the client."""

    @property
    def http2(self) -> bool:
        """Whether the exchange runs on HTTP/2 (full-duplex streams, trailers)."""

    async def read_chunk(self, max_wait: float | None = None) -> bytes | None:
        """The next request body bytes; None once the client finished sending.

        With ``max_wait``, waiting longer than that for bytes fails ``deadline_exceeded``.
        """

    def respond(self, status: int, headers: list[tuple[str, str]], *, end: bool = False) -> None:
        """Send response headers (``end`` = no body follows)."""

    async def write(self, data: bytes) -> None:
        """Queue body bytes; waits while the peer is not reading (bounded buffering)."""

    def write_nowait(self, data: bytes) -> None:
        """Queue a small body without waiting (error bodies, health checks)."""

    def try_write(self, data: bytes, *, urgent: bool = False) -> bool:
        """Queue body bytes now if the buffer is below its high-water mark; False = use ``write``.

        ``urgent``: put them on the socket in this turn (once per turn and connection).
        """

    def finish(self, trailers: list[tuple[str, str]] | None = None) -> None:
        """End the response, with HTTP trailers when given (HTTP/2 only)."""

    def respond_whole(self, content_type: str, body: bytes) -> bool:
        """A whole 200 response with a content-length, sent in one step if the transport can;
        False (nothing sent) means: use ``respond``, ``write`` and ``finish``."""


def plain_response(io: CallIO, status: int, text: str, extra: list[tuple[str, str]] | None = None) -> None:
    """A small text/plain response (health checks, 404/405/415)."""
    body = text.encode()
    headers = [("content-type", "text/plain; charset=utf-8"), ("content-length", str(len(body)))]
    if io.method == "HEAD":
        io.respond(status, headers + (extra or []), end=True)
        return
    io.respond(status, headers + (extra or []))
    io.write_nowait(body)
    io.finish()


class Reply:
    """Writes one call's response in the negotiated wire format."""

    __slots__ = ("io", "neg", "started")

    def __init__(self, io: CallIO, neg: Negotiated) -> None:
        self.io = io
        self.neg = neg
        self.started = False

    def start(self) -> None:
        """Send the success response headers (idempotent)."""
        if self.started:
            return
        self.started = True
        headers = [("content-type", self.neg.content_type)]
        if self.neg.wire is Wire.GRPC:
            headers.append(("grpc-accept-encoding", "gzip,identity"))
        self.io.respond(200, headers)

    async def send(self, payload: bytes) -> None:
        """Send one encoded message on a framed stream."""
        if not self.started:
            self.start()
        await self.io.write(encode_message(payload))

    def try_send(self, payload: bytes, *, urgent: bool = False) -> bool:
        """Queue one framed message without waiting when the stream has room (else False).

        The session's latency path: an ``urgent`` Dispatch (one decided while another
        request, such as an Enqueue, is handled) is written in that same turn, before
        the Enqueue's reply.
        """
        if not self.started:
            self.start()
        return self.io.try_write(encode_message(payload), urgent=urgent)

    def whole(self, payload: bytes) -> bool:
        """A Connect unary success in one step when the transport can (see ``CallIO.respond_whole``);
        False: nothing sent, use :meth:`unary`."""
        if self.neg.wire is not Wire.CONNECT_UNARY or not self.io.respond_whole(
            self.neg.content_type, payload
        ):
            return False
        self.started = True
        return True

    async def unary(self, payload: bytes) -> None:
        """Send a unary success response in steps (after :meth:`whole` declined)."""
        if self.neg.wire is Wire.CONNECT_UNARY:
            self.started = True
            self.io.respond(
                200, [("content-type", self.neg.content_type), ("content-length", str(len(payload)))]
            )
            await self.io.write(payload)
            self.io.finish()
            return
        await self.send(payload)
        await self.end(None)

    async def end(self, error: ConveyorError | None) -> None:
        """Finish a framed call (``error`` None = OK), or fail a call of any format."""
        wire, io = self.neg.wire, self.io
        if wire is Wire.CONNECT_UNARY:
            assert error is not None, "a Connect unary success goes through unary()"
            self._connect_unary_error(error)
        elif wire is Wire.GRPC:
            if self.started:
                io.finish(grpc_trailers(error))
            else:  # Trailers-Only
                self.started = True
                io.respond(200, [("content-type", self.neg.content_type), *grpc_trailers(error)], end=True)
        elif wire is Wire.GRPC_WEB:
            if self.started:
                await io.write(grpc_web_trailer_frame(error))
                io.finish()
            else:
                self.started = True
                io.respond(200, [("content-type", self.neg.content_type), *grpc_trailers(error)], end=True)
        else:
            self.start()
            await io.write(connect_end_frame(error))
            io.finish()

    def fail_now(self, error: ConveyorError) -> None:
        """Fail a Connect unary call (its error needs no waiting); nothing when the stream is gone."""
        with contextlib.suppress(ConveyorError):
            self._connect_unary_error(error)

    def _connect_unary_error(self, error: ConveyorError) -> None:
        body = connect_error_body(error)
        self.started = True
        self.io.respond(
            error.code.http_status,
            [("content-type", "application/json"), ("content-length", str(len(body)))],
        )
        self.io.write_nowait(body)
        self.io.finish()
