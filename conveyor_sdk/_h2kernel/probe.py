"""Which path the kernel takes, and what it says when it has to leave the fast one.

The fast path reads and writes h2/hpack internals (see the package docstring for the list). It is
taken only while :data:`fast` is True:

* ``CONVEYOR_H2_PUBLIC=1`` (also ``true``/``yes``) sets it False before anything runs;
* the import-time checks (:mod:`.checks`) set it False, with a warning logged once, when an
  internal is missing or behaves differently from the versions in :data:`TESTED`;
* an unexpected exception inside fast-path code sets it False for every connection made after it
  (the connection that hit it fails with :func:`internal_error`).

Every fast function reads :data:`fast` at call time (or, per stream, when the stream starts), so
the public path is the same code path a test gets with the switch on.
"""

from __future__ import annotations

import logging
import os
from importlib import metadata

from conveyor_sdk.errors import Internal

__all__ = ["SWITCH", "TESTED", "KernelFault", "fast", "internal_error", "reason", "use_public", "versions"]

log = logging.getLogger("conveyor.h2kernel")

SWITCH = "CONVEYOR_H2_PUBLIC"
# The versions the fast path was written and tested against (pyproject pins the same ranges).
TESTED = {"h2": "4.4.1", "hpack": "4.2.0", "hyperframe": "6.1.0"}


def _switched_on() -> bool:
    return os.environ.get(SWITCH, "").strip().lower() in ("1", "true", "yes", "on")


fast: bool = not _switched_on()
reason: str | None = None if fast else f"{SWITCH} is set"
_warned = False


class KernelFault(Exception):
    """Fast-path code of the kernel failed in a way h2 itself would not (our bug, not the peer's)."""


def versions() -> str:
    """``h2 4.4.1, hpack 4.2.0, hyperframe 6.1.0`` as installed."""
    parts = []
    for name in TESTED:
        try:
            parts.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            parts.append(f"{name} (not installed)")
    return ", ".join(parts)


def use_public(why: str) -> None:
    """Leave the fast path for good (this process); the first time, log why."""
    # Module state on purpose: every fast function reads ``probe.fast`` at call time.
    global fast, reason, _warned  # noqa: PLW0603
    fast = False
    reason = why
    if not _warned:
        _warned = True
        log.warning(
            "HTTP/2 kernel: %s; using h2's public API from now on (slower, correct). Installed: %s; "
            "tested with %s",
            why,
            versions(),
            ", ".join(f"{k} {v}" for k, v in TESTED.items()),
        )


def path_name() -> str:
    return "fast path" if fast else "public path"


def internal_error(exc: BaseException) -> Internal:
    """The error a connection fails with when the HTTP/2 layer itself broke: ours, never the server's.

    A :class:`KernelFault` (fast-path code failed) also moves every later connection to the public path.
    """
    where = path_name()
    if isinstance(exc, KernelFault):
        cause = exc.__cause__ if exc.__cause__ is not None else exc
        use_public(f"fast-path code failed: {cause!r}")
        where = "fast path"
    else:
        cause = exc
    return Internal(
        f"internal error in conveyor's HTTP/2 layer ({where}; {versions()}): {cause!r}. "
        "This is a bug on this side, not the server's; please report it"
    )
