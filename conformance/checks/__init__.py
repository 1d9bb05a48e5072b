"""Built-in checks, one module per area. Importing a module registers its checks."""

from __future__ import annotations

import importlib

__all__ = ["MODULES", "load_all"]

MODULES = (
    "server_session",
    "server_flow",
    "server_outcomes",
    "server_leases",
    "server_silence",
    "server_enqueue",
    "server_json",
    "server_auth",
    "sdk_session",
    "sdk_execution",
    "worker_contract",
)


def load_all() -> None:
    """Import every check module (registration happens at import)."""
    for name in MODULES:
        importlib.import_module(f"{__name__}.{name}")
