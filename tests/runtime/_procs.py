"""/proc scanning (no psutil): the live descendants of this test process."""

from __future__ import annotations

import contextlib
import ctypes
import os

PR_SET_CHILD_SUBREAPER = 36


def set_subreaper(on: bool) -> None:
    """While on, orphaned grandchildren are re-parented to us, so a leak cannot hide behind init."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0)


def _stat(pid: int) -> tuple[int, str] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read().decode(errors="replace")
    except OSError:
        return None
    rest = data[data.rindex(")") + 2 :].split()
    return int(rest[1]), rest[0]  # ppid, state


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


def descendants(root: int | None = None) -> list[tuple[int, str, str]]:
    """(pid, state, cmdline) of every process below ``root`` (default: this process)."""
    root = os.getpid() if root is None else root
    parents: dict[int, tuple[int, str]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            info = _stat(int(name))
            if info is not None:
                parents[int(name)] = info
    found: list[tuple[int, str, str]] = []
    frontier = {root}
    while frontier:
        nxt = {pid for pid, (ppid, _) in parents.items() if ppid in frontier}
        found += [(pid, parents[pid][1], _cmdline(pid)) for pid in nxt]
        frontier = nxt
    return found


def reap_zombies(skip: set[int] | frozenset[int] = frozenset()) -> None:
    """Collect exited children nobody waited for (orphans re-parented to us), except ``skip``."""
    for pid, state, _ in descendants():
        if state == "Z" and pid not in skip:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)


def live_descendants(skip: set[int] | frozenset[int] = frozenset()) -> list[tuple[int, str, str]]:
    """Descendants not in ``skip`` that are not zombies, after reaping the other zombies."""
    reap_zombies(skip)
    return [d for d in descendants() if d[1] != "Z" and d[0] not in skip]
