"""HTTP/1.1 abuse from one client stays bounded: stalls, garbage, smuggling framing, bodies before auth."""

from __future__ import annotations

import random
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

from conveyor_server_min._http.h1conn import could_start_request
from conveyor_server_min._http.limits import HttpLimits

from .fakes import FakeServices, ThreadServer

GET_TASK = "/conveyor.v1.TaskService/GetTask"


@pytest.fixture(scope="module")
def quick() -> Iterator[ThreadServer]:
    """Sub-second head, body and idle timeouts; auth required (token ``s3cret``)."""
    limits = HttpLimits(header_timeout=0.3, body_timeout=0.3, idle_timeout=0.3)
    with ThreadServer(FakeServices(), dev=False, tokens=("s3cret",), http=limits) as srv:
        yield srv


@pytest.fixture(scope="module")
def patient() -> Iterator[ThreadServer]:
    """Long timeouts, so a quick answer cannot come from a timer."""
    limits = HttpLimits(header_timeout=60, body_timeout=60, idle_timeout=60)
    with ThreadServer(FakeServices(), dev=False, tokens=("s3cret",), http=limits) as srv:
        yield srv


def _exchange(port: int, data: bytes, timeout: float = 10.0) -> tuple[bytes, float]:
    """Send ``data``, read until the server closes; returns what came back and how long it took."""
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(data)
        sock.settimeout(timeout)
        chunks = []
        try:
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        except ConnectionResetError:
            pass
    return b"".join(chunks), time.monotonic() - start


def _post(path: str, body: bytes, **headers: Any) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "host: test", "content-type: application/json"]
    lines += [f"{k.replace('_', '-')}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def test_partial_request_line_gets_408_after_header_timeout(quick: ThreadServer) -> None:
    """A request line that never completes is answered 408 and closed (header_timeout)."""
    raw, took = _exchange(quick.port, b"POST /conveyor.v1.TaskSer")
    assert raw.startswith(b"HTTP/1.1 408")
    assert took < 8


def test_body_one_byte_short_gets_408_after_body_timeout(quick: ThreadServer) -> None:
    """A body that stops one byte short of its Content-Length is answered 408 and closed."""
    body = b'{"id":"x"}'
    request = _post(GET_TASK, body[:-1], authorization="Bearer s3cret", content_length=len(body))
    raw, took = _exchange(quick.port, request)
    assert raw.startswith(b"HTTP/1.1 408")
    assert took < 8


def test_silent_connection_is_closed_after_header_timeout(quick: ThreadServer) -> None:
    """A connection that never sends a byte is closed (first bytes within header_timeout)."""
    raw, took = _exchange(quick.port, b"")
    assert raw == b"" and took < 8


def test_idle_keep_alive_connection_is_closed(quick: ThreadServer) -> None:
    """After a complete exchange, a keep-alive connection idle for idle_timeout is closed."""
    raw, took = _exchange(quick.port, b"GET /healthz HTTP/1.1\r\nhost: test\r\n\r\n")
    assert raw.startswith(b"HTTP/1.1 200") and raw.endswith(b"ok")
    assert took < 8


def test_unauthenticated_body_is_not_waited_for(patient: ThreadServer) -> None:
    """A POST announcing 5 MiB without a token is refused from its head and the connection closes."""
    request = _post(GET_TASK, b"", content_length=5 << 20)
    raw, took = _exchange(patient.port, request)
    assert raw.startswith(b"HTTP/1.1 401")
    assert b"connection: close" in raw.lower()
    assert took < 8


def test_content_length_with_transfer_encoding_closes_after_the_answer(patient: ThreadServer) -> None:
    """Content-Length + Transfer-Encoding: answered, then the connection is closed (RFC 9112 6.3)."""
    body = b'{"id":"x"}'
    chunked = f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n"
    request = _post(
        GET_TASK,
        chunked,
        authorization="Bearer s3cret",
        content_length=len(body),
        transfer_encoding="chunked",
    )
    raw, took = _exchange(patient.port, request)
    assert raw.startswith(b"HTTP/1.1 200") and b'"id":"x"' in raw
    assert took < 8


@pytest.mark.parametrize("seed", range(40))
def test_random_bytes_instead_of_a_request_are_answered_at_once(patient: ThreadServer, seed: int) -> None:
    """Random bytes where a request (or the HTTP/2 preface) should be: an answer or a close, quickly."""
    noise = random.Random(seed).randbytes(200)
    raw, took = _exchange(patient.port, noise, timeout=20)
    assert took < 5, f"seed {seed}: no answer for {took:.1f}s"
    assert raw == b"" or raw.startswith((b"HTTP/1.1 4", b"\x00"))


def test_could_start_request() -> None:
    """The request-line sniff accepts method prefixes and rejects bytes no method can start with."""
    for ok in (b"", b"P", b"POST", b"POST /", b"\r\nGET / HTTP/1.1", b"M-SEARCH *"):
        assert could_start_request(ok), ok
    for bad in (b"\x00", b"GE\x80", b" GET", b"A" * 40, b"GET\t/"):
        assert not could_start_request(bad), bad
