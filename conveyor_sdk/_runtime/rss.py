"""A process's memory, for ``--max-memory-per-child``: where it can be measured, and how.

* ``/proc`` (Linux): the current resident set (``/proc/self/statm``);
* ``getrusage`` (macOS, the BSDs): the peak resident set, ``ru_maxrss`` (bytes on macOS,
  KiB elsewhere). A peak only grows, which is what recycling needs: a child that once
  went over the limit is replaced (Celery's ``worker_max_memory_per_child`` reads the same);
* neither (Windows): memory cannot be measured, so the flag is refused rather than
  silently doing nothing.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

__all__ = ["check_memory_limit", "read_rss", "rss_source"]

from types import ModuleType

_resource: ModuleType | None
try:
    import resource as _resource
except ImportError:  # Windows
    _resource = None


def rss_source() -> str | None:
    """How this platform measures a process's RSS: ``"/proc"``, ``"getrusage"`` or None."""
    if os.path.exists("/proc/self/statm"):
        return "/proc"
    return "getrusage" if _resource is not None else None


def read_rss() -> int:
    """This process's resident set size in bytes (the peak with ``getrusage``; 0 if unknown)."""
    try:
        with open("/proc/self/statm", "rb") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        pass
    if _resource is None:
        return 0
    peak = _resource.getrusage(_resource.RUSAGE_SELF).ru_maxrss
    return int(peak) if sys.platform == "darwin" else int(peak) * 1024


def check_memory_limit(mb: int, probe: Callable[[], str | None] = rss_source) -> None:
    """Refuse ``--max-memory-per-child`` where RSS cannot be measured (``ValueError``, one line)."""
    if mb and probe() is None:
        raise ValueError(
            f"--max-memory-per-child {mb}: this platform ({sys.platform}) cannot measure a process's "
            "memory (no /proc, no getrusage); use --max-tasks-per-child to recycle children instead"
        )
