"""Routes of the dashboard (Starlette). Pages are server-rendered; live updates re-fetch a page's
``live`` fragment (same URL, header ``X-Dashboard-Live: 1``) every ``poll_interval`` seconds.
"""

from __future__ import annotations

import contextlib
import hmac
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from conveyor_cli._network import CA_ENV
from conveyor_cli.dashboard import actions, bulk, pages, views
from conveyor_cli.dashboard.banner import problem
from conveyor_cli.dashboard.config import DashboardConfig
from conveyor_cli.dashboard.events import EventFeed
from conveyor_cli.dashboard.render import shared_env
from conveyor_cli.dashboard.security import SecurityMiddleware, cookie_value, safe_next, set_session
from conveyor_sdk._client.retry import RetryConfig
from conveyor_sdk.client import Client
from conveyor_sdk.errors import ConveyorError, InvalidArgument
from conveyor_sdk.types import TaskState

__all__ = ["create_app", "problem"]

log = logging.getLogger("conveyor.dashboard")
STATIC = Path(__file__).parent / "static"
Fetch = Callable[[Request], Awaitable[dict[str, Any]]]


class Dashboard:
    """Holds the client, the event feed and the templates for one app instance."""

    def __init__(self, config: DashboardConfig) -> None:
        self.config = config
        self.templates = shared_env()
        self.client: Client | None = None
        self.feed: EventFeed | None = None
        ca_file = os.environ.get(CA_ENV)  # conveyor --ca-file / CONVEYOR_CA_FILE (an https:// server)
        self.ca = Path(ca_file).read_bytes() if ca_file else None

    @contextlib.asynccontextmanager
    async def lifespan(self, _app: Starlette) -> AsyncIterator[None]:
        cfg = self.config
        once = RetryConfig(attempts=1)  # a down server shows a banner now, not after retries
        self.client = Client(
            cfg.server, token=cfg.token, timeout=cfg.rpc_timeout, retry=once, tls_ca_cert=self.ca
        )
        self.feed = EventFeed(self.client, cfg.event_buffer)
        if not cfg.feed_on_demand:
            self.feed.start()
        try:
            yield
        finally:
            await self.feed.stop()
            await self.client.aclose()

    def html(self, template: str, status: int = 200, /, **ctx: Any) -> HTMLResponse:
        """Render ``template`` (autoescaped) with the common context."""
        base = {"server": self.config.server, "poll_ms": int(self.config.poll_interval * 1000)}
        body = self.templates.get_template(template).render(**base, **ctx)
        return HTMLResponse(body, status_code=status)

    def page(self, name: str, title: str, fetch: Fetch) -> Callable[[Request], Awaitable[Response]]:
        async def handler(request: Request) -> Response:
            started = time.perf_counter()
            if self.feed is not None:
                self.feed.start()  # idempotent; the first page starts it with feed_on_demand
            live = bool(request.headers.get("x-dashboard-live"))
            try:
                data, status, banner = await fetch(request), 200, None
            except (ConveyorError, ValueError) as exc:
                if not isinstance(exc, ConveyorError):
                    exc = _bad_request(exc)
                banner = problem(exc, self.config.server)
                data, status = {}, _status(banner["code"])
            except Exception as exc:
                log.exception("page %s failed", name)
                banner = problem(exc, self.config.server)
                data, status = {}, 500
            ctx = {"banner": banner, "title": title, "request": request, "nav": name, **data}
            response = self.html(f"live/{name}.html" if live else f"{name}.html", status, **ctx)
            elapsed_ms = (time.perf_counter() - started) * 1000  # admin RPCs + rendering
            response.headers["server-timing"] = f"page;dur={elapsed_ms:.2f}"
            return response

        return handler

    def cli(self) -> Client:
        assert self.client is not None, "lifespan not started"
        return self.client


def _bad_request(exc: ValueError) -> ConveyorError:
    return InvalidArgument(str(exc))


def _status(code: str) -> int:
    return {"not_found": 404, "invalid_argument": 400, "unauthenticated": 502, "permission_denied": 502}.get(
        code, 503
    )


def create_app(config: DashboardConfig) -> Starlette:
    """The ASGI application (wrapped in the security middleware)."""
    d = Dashboard(config)

    async def overview(_r: Request) -> dict[str, Any]:
        assert d.feed is not None
        return await views.overview(d.cli(), d.feed)

    async def queue(r: Request) -> dict[str, Any]:
        q = r.query_params
        state = TaskState.parse(q["state"]) if q.get("state") else None
        flt = views.QueueFilter(state, q.get("type", ""), q.get("id", ""), q.get("page", ""))
        assert d.feed is not None
        data = await views.queue_page(d.cli(), r.path_params["name"], flt, config.page_size, d.feed)
        notice = {k: q.get(k, "") for k in ("deleted", "bulk", "ok", "failed")}
        return {"filter": flt, "notice": notice, **data}

    async def search(r: Request) -> dict[str, Any]:
        q = r.query_params
        state = TaskState.parse(q["state"]) if q.get("state") else None
        wanted = pages.Search(q.get("q", "").strip(), q.get("type", "").strip(), state)
        found = await pages.search(d.cli(), wanted)
        return {"states": views.STATES, **found}

    async def limits(r: Request) -> dict[str, Any]:
        notice = {k: r.query_params.get(k, "") for k in ("saved", "removed")}
        return {"notice": notice, **await pages.limits(d.cli())}

    async def task(r: Request) -> dict[str, Any]:
        return await views.task_detail(d.cli(), r.path_params["id"])

    async def workers(_r: Request) -> dict[str, Any]:
        return await views.workers(d.cli())

    async def cron(_r: Request) -> dict[str, Any]:
        return await views.cron(d.cli())

    async def events(_r: Request) -> dict[str, Any]:
        assert d.feed is not None
        return {"events": d.feed.recent(), "feed_error": d.feed.error}

    async def login(request: Request) -> Response:
        nxt = safe_next(request.query_params.get("next"))
        if request.method == "GET":
            return d.html("login.html", title="Log in", next=nxt, failed=False, banner=None, nav="")
        form = await request.form()
        given = str(form.get("token", ""))
        if config.auth_token and hmac.compare_digest(given.encode(), config.auth_token.encode()):
            return set_session(RedirectResponse(nxt, status_code=303), cookie_value(config.auth_token))
        return d.html("login.html", 401, title="Log in", next=nxt, failed=True, banner=None, nav="")

    routes = [
        Route("/", d.page("overview", "Overview", overview)),
        Route("/queues/{name}", d.page("queue", "Queue", queue)),
        Route("/tasks/{id}", d.page("task", "Task", task)),
        Route("/workers", d.page("workers", "Workers", workers)),
        Route("/cron", d.page("cron", "Cron", cron)),
        Route("/events", d.page("events", "Events", events)),
        Route("/search", d.page("search", "Search", search)),
        Route("/limits", d.page("limits", "Limits", limits)),
        Route("/login", login, methods=["GET", "POST"]),
        *bulk.routes(d),  # before actions.routes: /queues/{name}/bulk would match its pattern
        *actions.routes(d),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    app = Starlette(routes=routes, lifespan=d.lifespan)
    app.add_middleware(SecurityMiddleware, auth_token=config.auth_token)
    return app
