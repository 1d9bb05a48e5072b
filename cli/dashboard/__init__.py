"""The Conveyor web dashboard: server-rendered pages over the public conveyor.v1 admin RPCs.

``create_app(DashboardConfig(...))`` returns a Starlette (ASGI) application; ``conveyor dashboard``
serves it with uvicorn. See docs/dashboard.md.
"""

from __future__ import annotations

from conveyor_cli.dashboard.app import create_app
from conveyor_cli.dashboard.config import DashboardConfig

__all__ = ["DashboardConfig", "create_app"]
