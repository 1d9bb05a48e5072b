"""The reference server's services: TaskService, WorkerService.Session and AdminService over the engine.

``build_services(config)`` is the entry point the HTTP layer calls; see
:mod:`conveyor_server_min.service_api` for the contract. With ``db`` the engine
runs on the durable SQLite broker and every acknowledgement waits for its commit
(:mod:`.durability`).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable

from google.protobuf.message import Message

from conveyor_server_min._engine.clock import Clock, SystemClock
from conveyor_server_min._engine.engine import Engine
from conveyor_server_min._engine.store import SqliteBroker
from conveyor_server_min._services.admin import AdminService
from conveyor_server_min._services.durability import Committer, SettingsKeeper
from conveyor_server_min._services.loops import Ticker, TickerTime
from conveyor_server_min._services.session import SessionHandler
from conveyor_server_min._services.tasks import TaskService
from conveyor_server_min.service_api import EngineConfig, ServerStreamMethod, UnaryMethod

__all__ = ["Services", "build_services"]

_ADMIN = "/conveyor.v1.AdminService/"
_READS = frozenset(
    _ADMIN + name
    for name in ("ListQueues", "ListTasks", "ListRateLimits", "ListConcurrencyLimits", "ListGroupConfigs",
                 "ListCron", "ListWorkerSessions", "ClusterInfo", "BrokerInfo", "ListWebhookWorkers")
)  # fmt: skip


class Services:
    """A :class:`~conveyor_server_min.service_api.ServiceSet` backed by one :class:`Engine`."""

    def __init__(self, engine: Engine, *, ticker_time: TickerTime | None = None) -> None:
        self.engine = engine
        self.failed = asyncio.Event()
        broker = engine.broker
        self.committer = Committer(broker, self.failed.set) if isinstance(broker, SqliteBroker) else None
        self.session = SessionHandler(engine, self.committer.sync if self.committer else None)
        methods: list[UnaryMethod] = TaskService(engine).methods()
        streams: list[ServerStreamMethod] = []
        self.admin = AdminService(engine, self.session)
        self.keeper: SettingsKeeper | None = None
        extra: Callable[[], object] = self.admin.cron.tick
        if isinstance(broker, SqliteBroker):
            keeper = self.keeper = SettingsKeeper(engine, broker, self.admin.cron)
            keeper.restore()
            tick = extra
            extra = lambda: (tick(), keeper.save_cron())  # noqa: E731 - a two-step job for the ticker
        self.ticker = Ticker(engine, extra=extra, clock=ticker_time)
        methods += self.admin.methods()
        streams += self.admin.streams()
        if self.committer is not None:
            methods = [self._durable(m) for m in methods]
        self.unary: dict[str, UnaryMethod] = {m.path: m for m in methods}
        self.server_streams: dict[str, ServerStreamMethod] = {m.path: m for m in streams}
        self._stopped = False

    def __repr__(self) -> str:
        return f"Services(engine={self.engine!r}, methods={len(self.unary)})"

    def metrics_text(self) -> str:
        """The Prometheus exposition served by ``--metrics-port``."""
        return self.engine.metrics_text()

    def _durable(self, method: UnaryMethod) -> UnaryMethod:
        """The same method, answering only after its changes (and any before them) are committed."""
        handler, committer, keeper = method.handler, self.committer, self.keeper
        assert committer is not None and keeper is not None
        admin = method.path.startswith(_ADMIN) and method.path not in _READS

        async def call(req, ctx):  # type: ignore[no-untyped-def]
            try:
                result = handler(req, ctx)
                return result if isinstance(result, Message) else await result
            finally:
                if admin:
                    keeper.save()
                await committer.sync()

        return dataclasses.replace(method, handler=call)

    async def start(self) -> None:
        self.ticker.start()
        if self.committer is not None:
            self.engine.wake_due()  # tasks loaded from the store

    async def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        await self.admin.stop()
        await self.session.stop()
        await self.ticker.stop()
        if self.committer is not None:
            await self.committer.close()


def build_services(
    config: EngineConfig,
    *,
    clock: Clock | None = None,
    rand: Callable[[], float] | None = None,
    db: str | None = None,
    ticker_time: TickerTime | None = None,
) -> Services:
    """Build the ServiceSet the HTTP layer serves; ``db`` selects the durable SQLite store.

    ``clock`` and ``ticker_time`` inject time: a test passes a ``VirtualTime`` and its clock
    (``_services.loops``) to run leases, reaping and backoffs in virtual time."""
    clock = clock or SystemClock()
    broker = SqliteBroker(db, clock.now()) if db else None
    return Services(Engine(config, clock=clock, rand=rand, broker=broker), ticker_time=ticker_time)
