"""The registry of checks and the ``@check`` decorator that fills it.

Check modules under :mod:`conveyor_conformance.checks` register on import;
:func:`default_registry` imports them once and returns the shared registry.
Ids are stable, unique, and name the behavior (``sdk.9.heartbeats-every-inflight-id``).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Awaitable, Callable, Iterable, Iterator

from conveyor_conformance.context import CheckContext
from conveyor_conformance.model import Check, Family, Requirement

__all__ = ["CheckFn", "Registry", "check", "default_registry"]

CheckFn = Callable[[CheckContext], Awaitable[str | None]]  # what @check registers

_ID = re.compile(r"^(server|sdk|worker)(\.[0-9a-z][0-9a-z-]*)+$")


class Registry:
    """An ordered collection of checks keyed by id."""

    def __init__(self) -> None:
        self._checks: dict[str, Check] = {}

    def add(self, item: Check) -> Check:
        """Register ``item``; ids must be unique and well-formed."""
        if item.id in self._checks:
            raise ValueError(f"duplicate check id {item.id!r}")
        if not _ID.match(item.id):
            raise ValueError(f"malformed check id {item.id!r}")
        self._checks[item.id] = item
        return item

    def __iter__(self) -> Iterator[Check]:
        return iter(self._checks.values())

    def __len__(self) -> int:
        return len(self._checks)

    def __contains__(self, check_id: object) -> bool:
        return check_id in self._checks

    def get(self, check_id: str) -> Check:
        """The check with ``check_id`` (KeyError when unknown)."""
        return self._checks[check_id]

    def select(self, only: Iterable[str] = (), families: Iterable[Family] = ()) -> list[Check]:
        """Checks matching any ``only`` pattern (exact id, glob, or id prefix) and family filter.

        Raises ValueError naming a pattern that matches nothing.
        """
        fams = set(families)
        pool = [c for c in self._checks.values() if not fams or c.family in fams]
        patterns = list(only)
        if not patterns:
            return pool
        chosen: dict[str, Check] = {}
        for pattern in patterns:
            hits = [c for c in pool if _matches(c.id, pattern)]
            if not hits:
                raise ValueError(f"no check matches {pattern!r}")
            chosen.update((c.id, c) for c in hits)
        return [c for c in pool if c.id in chosen]


def _matches(check_id: str, pattern: str) -> bool:
    if any(ch in pattern for ch in "*?["):
        return fnmatch.fnmatchcase(check_id, pattern)
    return check_id == pattern or check_id.startswith(pattern.rstrip(".") + ".")


_DEFAULT = Registry()
_loaded = False


def check(
    id: str,  # the natural name for a check's id
    *,
    section: str,
    description: str,
    requires: Iterable[Requirement] = (),
    divergence: str = "",
    timeout: float = 60.0,
    declares: Iterable[str] = (),
    optional: bool = False,
    registry: Registry | None = None,
) -> Callable[[CheckFn], CheckFn]:
    """Decorator registering an async check function under ``id``.

    ``optional`` marks a check of behaviour the protocol document does not require (it is silent
    there): when it raises :class:`~conveyor_conformance.model.OptionalAbsent` the result is
    ``optional-fail``, which does not fail the run (any other failure still does).

    ``declares`` names worker-program extensions the check cannot run without
    (see :mod:`conveyor_conformance.declare`); a program that does not declare one
    gets ``n/a (program does not declare X)``.
    """
    family = Family(id.split(".", 1)[0])

    def register(fn: CheckFn) -> CheckFn:
        (registry if registry is not None else _DEFAULT).add(
            Check(
                id=id,
                section=section,
                description=description,
                family=family,
                fn=fn,
                requires=frozenset(requires),
                divergence=divergence,
                timeout=timeout,
                declares=frozenset(declares),
                optional=optional,
            )
        )
        return fn

    return register


def default_registry() -> Registry:
    """The shared registry with every built-in check module imported."""
    global _loaded  # noqa: PLW0603  # one-time lazy import of the check modules
    if not _loaded:
        from conveyor_conformance import checks

        checks.load_all()
        _loaded = True
    return _DEFAULT
