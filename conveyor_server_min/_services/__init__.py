"""The reference server's services: TaskService, WorkerService.Session and AdminService over the engine.

``build_services(config)`` is the entry point the HTTP layer calls; see
:mod:`conveyor_server_min.service_api` for the contract.
"""

from __future__ import annotations

from collections.abc import Callable

from conveyor_server_min._engine.clock import Clock
from conveyor_server_min._engine.engine import Engine
from conveyor_server_min._services.admin import AdminService
from conveyor_server_min._services.loops import Ticker
from conveyor_server_min._services.session import SessionHandler
from conveyor_server_min._services.tasks import TaskService
from conveyor_server_min.service_api import EngineConfig, ServerStreamMethod, UnaryMethod

__all__ = ["Services", "build_services"]


class Services:
    """A :class:`~conveyor_server_min.service_api.ServiceSet` backed by one :class:`Engine`."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.session = SessionHandler(engine)
        methods: list[UnaryMethod] = TaskService(engine).methods()
        streams: list[ServerStreamMethod] = []
        self.admin = AdminService(engine, self.session)
        self.ticker = Ticker(engine, extra=self.admin.cron.tick)
        methods += self.admin.methods()
        streams += self.admin.streams()
        self.unary: dict[str, UnaryMethod] = {m.path: m for m in methods}
        self.server_streams: dict[str, ServerStreamMethod] = {m.path: m for m in streams}
        self._stopped = False

    def __repr__(self) -> str:
        return f"Services(engine={self.engine!r}, methods={len(self.unary)})"

    async def start(self) -> None:
        self.ticker.start()

    async def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        await self.admin.stop()
        await self.session.stop()
        await self.ticker.stop()


def build_services(
    config: EngineConfig,
    *,
    clock: Clock | None = None,
    rand: Callable[[], float] | None = None,
) -> Services:
    """Build the ServiceSet the HTTP layer serves."""
    return Services(Engine(config, clock=clock, rand=rand))
