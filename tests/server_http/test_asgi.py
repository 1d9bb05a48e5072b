"""The ASGI bridge: a web application served on the server's own port beside the RPCs (h1 and h2)."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from conveyor_server_min._http.asgi import WEB_MAX_BODY, AsgiBridge, WebAppError
from conveyor_server_min._http.limits import HttpLimits
from conveyor_server_min.config import ServerConfig
from conveyor_server_min.server import Server

from .fakes import ENQUEUE, FakeServices, ThreadServer
from .h2client import H2Client


class App:
    """A small pure-ASGI application that records what it saw."""

    def __init__(self, *, lifespan: str = "ok") -> None:
        self.lifespan = lifespan
        self.events: list[str] = []
        self.scopes: list[dict[str, Any]] = []
        self.gate = threading.Event()
        self.url = ""

    def __call__(self, url: str) -> App:  # the Server's web factory
        self.url = url
        return self

    async def app(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        self.scopes.append(scope)
        route = scope["path"].strip("/").split("/")[0].replace("-", "_") or "echo"
        await getattr(self, route)(scope, receive, send)

    async def _lifespan(self, receive: Any, send: Any) -> None:
        if self.lifespan == "unsupported":
            raise ValueError("no lifespan here")
        if self.lifespan == "hang":
            await asyncio.sleep(3600)
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self.events.append("startup")
                kind = "failed" if self.lifespan == "fail" else "complete"
                await send({"type": f"lifespan.startup.{kind}", "message": "no database"})
            else:
                self.events.append("shutdown")
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def echo(self, scope: Any, receive: Any, send: Any) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {k.decode(): v.decode() for k, v in scope["headers"]}
        info = {
            "method": scope["method"],
            "path": scope["path"],
            "raw_path": scope["raw_path"].decode(),
            "query": scope["query_string"].decode(),
            "http_version": scope["http_version"],
            "scheme": scope["scheme"],
            "host": headers.get("host"),
            "cookie": headers.get("cookie"),
            "pseudo": [k for k in headers if k.startswith(":")],
            "client": list(scope["client"]),
            "body": len(body),
        }
        data = json.dumps(info).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-length", b"%d" % len(data))],
            }
        )
        await send({"type": "http.response.body", "body": data})

    async def stream(self, scope: Any, receive: Any, send: Any) -> None:
        await send(
            {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]}
        )
        await send({"type": "http.response.body", "body": b"one,", "more_body": True})
        released = await asyncio.to_thread(self.gate.wait, 20)  # the client has read "one," first
        await send(
            {"type": "http.response.body", "body": b"two," if released else b"late,", "more_body": True}
        )
        await send({"type": "http.response.body", "body": b"three"})

    async def boom(self, scope: Any, receive: Any, send: Any) -> None:
        raise RuntimeError("secret detail of the failure")

    async def boom_late(self, scope: Any, receive: Any, send: Any) -> None:
        await send(
            {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]}
        )
        await send({"type": "http.response.body", "body": b"partial", "more_body": True})
        raise RuntimeError("failed in the middle")

    async def after(self, scope: Any, receive: Any, send: Any) -> None:
        while (await receive()).get("more_body"):
            pass
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})
        message = await asyncio.wait_for(receive(), 10)
        self.events.append(message["type"])

    async def forever(self, scope: Any, receive: Any, send: Any) -> None:
        await send(
            {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]}
        )
        try:
            while True:
                await send({"type": "http.response.body", "body": b"x" * 1024, "more_body": True})
                await asyncio.sleep(0.01)
        except BaseException as exc:
            self.events.append(f"forever ended: {type(exc).__name__}")
            raise


def _serve(app: App, **config: Any) -> ThreadServer:
    return ThreadServer(FakeServices(), web=lambda url: _bound(app, url), **config)


def _bound(app: App, url: str) -> Any:
    app.url = url
    return app.app


@pytest.fixture(scope="module")
def web() -> Iterator[tuple[ThreadServer, App]]:
    """An in-thread server (auth off) serving :class:`App` beside fake RPCs."""
    app = App()
    with _serve(app) as server:
        yield server, app


@pytest.fixture
def h1() -> Iterator[httpx.Client]:
    """An httpx client speaking HTTP/1.1."""
    with httpx.Client(timeout=15) as client:
        yield client


@pytest.fixture
def h2() -> Iterator[httpx.Client]:
    """An httpx client speaking HTTP/2 with prior knowledge (h2c)."""
    with httpx.Client(http1=False, http2=True, timeout=15) as client:
        yield client


def test_scope_carries_path_query_headers_and_client(web: tuple[ThreadServer, App]) -> None:
    """GET with a query string: the app sees path, raw path, query, Host, client address (HTTP/1.1)."""
    server, _ = web
    resp = httpx.get(server.url + "/echo/a%20b?state=pending&type=x%2Fy", timeout=15)
    info = resp.json()
    assert resp.status_code == 200
    assert info["path"] == "/echo/a b" and info["raw_path"] == "/echo/a%20b"
    assert info["query"] == "state=pending&type=x%2Fy"
    assert info["http_version"] == "1.1" and info["scheme"] == "http"
    assert info["host"] == server.url.split("://")[1]
    assert info["client"][0] == "127.0.0.1" and info["client"][1] > 0


def test_scope_over_http2(web: tuple[ThreadServer, App], h1: httpx.Client, h2: httpx.Client) -> None:
    """Over h2c the query survives, :authority becomes Host, pseudo-headers and split cookies are merged."""
    server, _ = web
    resp = h2.get(server.url + "/echo?x=1", headers=[("cookie", "a=1"), ("cookie", "b=2")])
    info = resp.json()
    assert resp.http_version == "HTTP/2" and info["http_version"] == "2"
    assert info["query"] == "x=1" and info["pseudo"] == []
    assert info["host"] == server.url.split("://")[1]
    assert info["cookie"] == "a=1; b=2"


def test_form_post_reaches_the_app(web: tuple[ThreadServer, App], h1: httpx.Client, h2: httpx.Client) -> None:
    """A POST that is no RPC (form content-type, non-RPC path) goes to the app with its body (h1, h2)."""
    server, _ = web
    for client in (h1, h2):
        resp = client.post(server.url + "/echo", data={"token": "t" * 100})
        assert resp.status_code == 200, resp.text
        assert resp.json()["body"] == len("token=" + "t" * 100)


def test_rpcs_and_health_checks_are_unaffected(
    web: tuple[ThreadServer, App], h1: httpx.Client, h2: httpx.Client
) -> None:
    """Connect unary, /healthz and /readyz still answer on both protocols; RPC paths never reach the app."""
    server, app = web
    before = len(app.scopes)
    for client in (h1, h2):
        assert client.post(server.url + ENQUEUE, json={"type": "t"}).status_code == 200
        assert client.get(server.url + "/healthz").text == "ok"
        assert client.get(server.url + "/readyz").text == "ok"
        resp = client.post(server.url + ENQUEUE, data={"x": "1"})  # an RPC path with a form body
        assert resp.status_code == 415
        resp = client.post(server.url + "/conveyor.v1.Nope/Call", json={})
        assert resp.json()["code"] == "unimplemented"
    assert len(app.scopes) == before


def test_streamed_response_is_sent_as_it_is_produced(web: tuple[ThreadServer, App]) -> None:
    """more_body chunks leave at once (HTTP/1.1 chunked): the client reads one before the next exists."""
    server, app = web
    app.gate.clear()
    with httpx.stream("GET", server.url + "/stream", timeout=15) as resp:
        assert resp.headers.get("transfer-encoding") == "chunked"
        chunks = resp.iter_raw()
        assert next(chunks) == b"one,"
        app.gate.set()
        assert b"".join(chunks) == b"two,three"


def test_app_exception_is_500_without_traceback(
    web: tuple[ThreadServer, App], h1: httpx.Client, h2: httpx.Client, caplog: pytest.LogCaptureFixture
) -> None:
    """An exception before the response: 500 with a fixed text, the error logged with its traceback."""
    server, _ = web
    with caplog.at_level(logging.ERROR, logger="conveyor.server.web"):
        for client in (h1, h2):
            resp = client.get(server.url + "/boom")
            assert resp.status_code == 500
            assert resp.text == "internal server error"
    assert any("secret detail" in (r.exc_text or "") for r in caplog.records)


def test_app_exception_after_start_aborts_the_response(
    web: tuple[ThreadServer, App], h1: httpx.Client, h2: httpx.Client
) -> None:
    """An exception mid-stream never looks like a complete response: h1 closes, h2 resets the stream."""
    server, _ = web
    with pytest.raises(httpx.RemoteProtocolError):
        httpx.get(server.url + "/boom-late", timeout=15).read()
    with pytest.raises(httpx.RemoteProtocolError):
        h2.get(server.url + "/boom-late").read()
    assert httpx.get(server.url + "/healthz", timeout=15).text == "ok"


def test_oversize_body_is_refused(web: tuple[ThreadServer, App]) -> None:
    """A declared Content-Length over the limit: 413 before the app runs; an undeclared one: when it grows."""
    server, app = web
    big = b"x" * (WEB_MAX_BODY + 1)
    before = len(app.scopes)
    assert httpx.post(server.url + "/echo", content=big, timeout=15).status_code == 413
    assert len(app.scopes) == before  # refused from the head

    def chunks() -> Iterator[bytes]:
        for _ in range(WEB_MAX_BODY // 65536 + 1):
            yield b"y" * 65536

    assert httpx.post(server.url + "/echo", content=chunks(), timeout=15).status_code == 413
    assert (
        httpx.post(server.url + "/echo", content=b"z" * WEB_MAX_BODY, timeout=15).json()["body"]
        == WEB_MAX_BODY
    )

    async def h2_statuses() -> list[str]:
        client = await H2Client().connect("127.0.0.1", server.port)
        declared = await client.open("/echo", "text/plain", extra={"content-length": str(len(big))})
        growing = await client.open("/echo", "text/plain")
        sender = asyncio.create_task(client.send(growing, big, end=True))
        statuses = [
            (await client.wait(sid, lambda st: ":status" in st.headers)).headers[":status"]
            for sid in (declared, growing)
        ]
        sender.cancel()
        await client.close()
        return statuses

    assert asyncio.run(h2_statuses()) == ["413", "413"]


def test_receive_says_disconnect_after_the_response(web: tuple[ThreadServer, App]) -> None:
    """Once the response is complete, receive() answers http.disconnect (it does not hang)."""
    server, app = web
    assert httpx.post(server.url + "/after", content=b"abc", timeout=15).status_code == 204
    server.call(lambda: None)
    deadline = threading.Event()
    for _ in range(100):
        if "http.disconnect" in app.events:
            break
        deadline.wait(0.05)
    assert "http.disconnect" in app.events


def test_client_going_away_ends_the_call(web: tuple[ThreadServer, App]) -> None:
    """A client that leaves an endless stream ends the app's call (cancelled), and the server lives on."""
    server, app = web
    with httpx.stream("GET", server.url + "/forever", timeout=15) as resp:
        next(resp.iter_raw())
    waited = threading.Event()
    for _ in range(200):
        if any(e.startswith("forever ended") for e in app.events):
            break
        waited.wait(0.05)
    assert any(e.startswith("forever ended") for e in app.events), app.events
    assert httpx.get(server.url + "/healthz", timeout=15).text == "ok"


def test_h2_body_timeout_is_408() -> None:
    """An HTTP/2 request whose body stalls longer than body_timeout gets 408."""
    app = App()
    with _serve(app, http=HttpLimits(body_timeout=0.3)) as server:

        async def main() -> int:
            client = await H2Client().connect("127.0.0.1", server.port)
            try:
                sid = await client.open("/echo", content_type="text/plain")
                state = await client.wait(sid)
                return int(state.headers[":status"])
            finally:
                await client.close()

        assert asyncio.run(main()) == 408


def test_form_post_is_not_refused_for_missing_bearer_token() -> None:
    """With RPC tokens, a form POST without a bearer header reaches the app with its body (HTTP/1.1)."""
    app = App()
    with _serve(app, dev=False, tokens=("s3cret",)) as server:
        resp = httpx.post(server.url + "/echo", data={"a": "1"}, timeout=15)
        assert resp.status_code == 200 and resp.json()["method"] == "POST"
        assert resp.json()["body"] == len("a=1")  # the body was read, not dropped as for a refused RPC
        assert httpx.post(server.url + ENQUEUE, json={"type": "t"}, timeout=15).status_code == 401


def test_lifespan_runs_at_start_and_stop() -> None:
    """Startup completes before start() returns (the factory got the URL); shutdown runs in stop()."""
    app = App()
    with _serve(app) as server:
        assert app.events == ["startup"] and app.url == server.url
    assert app.events == ["startup", "shutdown"]


def test_app_without_lifespan_support_still_serves() -> None:
    """An app that raises on the lifespan scope is served all the same."""
    app = App(lifespan="unsupported")
    with _serve(app) as server:
        assert httpx.get(server.url + "/echo", timeout=15).status_code == 200


def test_failed_startup_fails_server_start() -> None:
    """lifespan.startup.failed makes Server.start raise WebAppError and release the port."""
    app = App(lifespan="fail")

    async def main() -> str:
        server = Server(
            ServerConfig(port=0, dev=True), services=FakeServices(), web=lambda url: _bound(app, url)
        )
        with pytest.raises(WebAppError, match="no database"):
            await server.start()
        return server.url

    url = asyncio.run(main())
    with pytest.raises(httpx.ConnectError):
        httpx.get(url + "/healthz", timeout=5)


def test_startup_that_never_completes_is_an_error() -> None:
    """A lifespan startup that hangs fails with WebAppError after the given time (no endless start)."""
    bridge = AsgiBridge(App(lifespan="hang").app, scheme="http", server=("127.0.0.1", 1))

    async def main() -> None:
        with pytest.raises(WebAppError, match=r"did not start within 0\.2s"):
            await bridge.startup(0.2)

    asyncio.run(main())


def test_without_web_app_root_is_404(fake_server: ThreadServer) -> None:
    """No web application: / is 404 and a form POST is 415, as before."""
    assert httpx.get(fake_server.url + "/", timeout=15).status_code == 404
    assert httpx.post(fake_server.url + "/x", data={"a": "1"}, timeout=15).status_code == 415
