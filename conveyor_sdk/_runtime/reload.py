"""``--reload``: poll ``.py`` mtimes under the app's directory; call back on a change.

Polling (default every 0.5 s) needs no dependency and works on every filesystem.
Hidden folders, ``__pycache__`` and virtual environments are skipped.

Last good code: :func:`take_snapshot` copies the ``.py`` files under the app's folder
into a private temporary folder. The fleet takes one before each generation of
children starts and keeps it while that generation serves; when a reload fails
(the code on disk does not import), a child that has to be replaced meanwhile
imports the snapshot instead of the broken files. Only ``.py`` files are copied
(bounded by :data:`SNAPSHOT_MAX_FILES` / :data:`SNAPSHOT_MAX_BYTES`; beyond that no
snapshot is kept and replacements import what is on disk).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

__all__ = ["app_directory", "changed_files", "discard_snapshot", "snapshot", "take_snapshot", "watch"]

log = logging.getLogger("conveyor.runtime.reload")
_SKIP = {"__pycache__", "node_modules", "venv", ".venv", "site-packages"}
SNAPSHOT_MAX_FILES = 5_000
SNAPSHOT_MAX_BYTES = 50 << 20


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


def take_snapshot(root: Path | str) -> str | None:
    """Copy every ``.py`` file under ``root`` into a new temporary folder; its path, or None.

    None when ``root`` holds more than the limits or a copy fails (logged); the
    caller then has no last-good copy and replacements import the files on disk.
    """
    files = list(snapshot(Path(root)))
    sizes = [os.stat(f).st_size if os.path.exists(f) else 0 for f in files]
    if len(files) > SNAPSHOT_MAX_FILES or sum(sizes) > SNAPSHOT_MAX_BYTES:
        log.warning(
            "not keeping a copy of the last good code: %d .py files, %d MiB under %s",
            len(files),
            sum(sizes) >> 20,
            root,
        )
        return None
    _remove_orphans()
    dest = tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-")
    try:
        for path in files:
            target = os.path.join(dest, os.path.relpath(path, root))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            try:
                shutil.copy2(path, target)
            except FileNotFoundError:
                continue  # removed since the walk
    except OSError as exc:
        log.warning("not keeping a copy of the last good code (%s)", exc)
        discard_snapshot(dest)
        return None
    return dest


_PREFIX = "conveyor-code-"


def _remove_orphans() -> None:
    """Remove copies left by a worker that was killed (SIGKILL leaves no chance to clean up)."""
    root = tempfile.gettempdir()
    try:
        names = [n for n in os.listdir(root) if n.startswith(_PREFIX)]
    except OSError:
        return
    for name in names:
        pid = name[len(_PREFIX) :].split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True


def discard_snapshot(path: str | None) -> None:
    """Remove a folder made by :func:`take_snapshot` (None: nothing to do)."""
    if path:
        shutil.rmtree(path, ignore_errors=True)
