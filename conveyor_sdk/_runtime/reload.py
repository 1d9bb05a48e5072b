"""``--reload``: poll ``.py`` mtimes under the app's directory; call back on a change.

Polling (default every 0.5 s) needs no dependency and works on every filesystem.
Hidden folders, ``__pycache__`` and virtual environments are skipped.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path

__all__ = ["app_directory", "changed_files", "snapshot", "watch"]

log = logging.getLogger("conveyor.runtime.reload")
_SKIP = {"__pycache__", "node_modules", "venv", ".venv", "site-packages"}


def snapshot(root: Path) -> dict[str, float]:
    """Path -> mtime of every ``.py`` file under ``root``."""
    found: dict[str, float] = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in _SKIP and not d.startswith(".")]
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                try:
                    found[path] = os.stat(path).st_mtime_ns / 1e9
                except OSError:
                    continue
    return found


def changed_files(before: dict[str, float], after: dict[str, float]) -> list[str]:
    """Files added, removed or modified between two snapshots."""
    keys = before.keys() | after.keys()
    return sorted(k for k in keys if before.get(k) != after.get(k))


def app_directory(module_file: str | None) -> Path:
    """The folder to watch for an app module (its package root's parent for packages)."""
    if not module_file:
        return Path.cwd()
    path = Path(module_file).resolve().parent
    while (path / "__init__.py").exists() and path.parent != path:
        path = path.parent
    return path


async def watch(root: Path, on_change: Callable[[list[str]], Awaitable[None]], interval: float = 0.5) -> None:
    """Run forever: call ``on_change(files)`` after files under ``root`` change."""
    before = await asyncio.to_thread(snapshot, root)
    log.info("watching %d .py files under %s for changes", len(before), root)
    while True:
        await asyncio.sleep(interval)
        after = await asyncio.to_thread(snapshot, root)
        files = changed_files(before, after)
        if files:
            before = after
            log.info("change detected in %s; reloading", ", ".join(Path(f).name for f in files[:3]))
            await on_change(files)
