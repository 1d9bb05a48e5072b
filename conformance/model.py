"""Result model of the conformance suite: checks, statuses, results and the run summary.

A :class:`Check` is data (stable id, protocol section, one-line description,
family, requirements, optional known upstream divergence) plus an async
function. Running it yields one :class:`CheckResult`.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Check",
    "CheckFailed",
    "CheckFn",
    "CheckResult",
    "Family",
    "NotApplicable",
    "OptionalAbsent",
    "Requirement",
    "Status",
    "Summary",
]


class Family(enum.Enum):
    """Which side of the protocol a check exercises."""

    SERVER = "server"
    SDK = "sdk"
    WORKER = "worker"  # cross-SDK worker programs through the environment contract


class Requirement(enum.Enum):
    """What a check needs from the environment; missing ones make it not applicable."""

    SHORT_LEASE = "short-lease"  # Welcome.lease_ttl of about 2 s and fast reap/promote/group timings
    AUTH_SERVER = "auth-server"  # a server that requires a bearer token
    WORKER_CMD = "worker-cmd"  # a worker program implementing the environment contract


class Status(enum.Enum):
    """Outcome of one check. Only FAIL and ERROR make a run fail."""

    PASS = "pass"
    FAIL = "fail"
    ERROR = "error"  # the check itself crashed or timed out
    NOT_APPLICABLE = "n/a"
    DIVERGENCE = "divergence"  # failed, but it is a known upstream divergence (profile upstream)
    OPTIONAL_FAIL = "optional-fail"  # an OPTIONAL behaviour (the document does not require it) is absent

    @property
    def failing(self) -> bool:
        """True for statuses that make the run exit non-zero."""
        return self in (Status.FAIL, Status.ERROR)


class CheckFailed(AssertionError):
    """Raised by a check when the implementation under test broke the protocol."""


class OptionalAbsent(CheckFailed):
    """Raised by an ``optional`` check when the OPTIONAL behaviour it looks for is absent.

    Only this, raised by a check registered ``optional=True``, is ``optional-fail``; anything else
    going wrong on the way (no Dispatch at all, say) is an ordinary failure.
    """


class NotApplicable(Exception):  # control flow, not an error
    """Raised by a check when the environment cannot show the behavior (e.g. a 60 s lease)."""


# A check: called with a ``context.CheckContext`` (``registry.CheckFn`` spells that type; the model
# does not import the context, which imports the model).
CheckFn = Callable[[Any], Awaitable["str | None"]]


@dataclass(frozen=True, slots=True)
class Check:
    """One executable item of the checklist."""

    id: str
    section: str
    description: str
    family: Family
    fn: CheckFn = field(repr=False, compare=False)
    requires: frozenset[Requirement] = frozenset()
    divergence: str = ""  # known upstream conveyord difference (server-behavior.md §15), if any
    timeout: float = 60.0
    declares: frozenset[str] = frozenset()  # worker extensions it needs (conveyor_conformance.declare)
    optional: bool = False  # judges behaviour the protocol document does not require: never fails a run


@dataclass(frozen=True, slots=True)
class CheckResult:
    """What running one check produced."""

    id: str
    section: str
    description: str
    family: str
    status: Status
    detail: str = ""
    divergence: str = ""
    duration: float = 0.0

    def to_dict(self) -> dict[str, object]:
        """Plain JSON-ready mapping."""
        return {
            "id": self.id,
            "section": self.section,
            "description": self.description,
            "family": self.family,
            "status": self.status.value,
            "detail": self.detail,
            "divergence": self.divergence,
            "duration_s": round(self.duration, 3),
        }


@dataclass(frozen=True, slots=True)
class Summary:
    """Counts over a run; ``ok`` is the exit-status verdict."""

    results: tuple[CheckResult, ...]
    profile: str = "strict"
    target: str = ""

    def count(self, status: Status) -> int:
        """How many results have ``status``."""
        return sum(1 for r in self.results if r.status is status)

    @property
    def ok(self) -> bool:
        """True when no selected check failed or errored."""
        return not any(r.status.failing for r in self.results)

    def failed_ids(self) -> list[str]:
        """Ids of failing checks, in run order."""
        return [r.id for r in self.results if r.status.failing]

    def by_id(self) -> dict[str, CheckResult]:
        """Results keyed by check id."""
        return {r.id: r for r in self.results}
