"""The verdict the suite gives against upstream conveyord: which checks fail, and why.

Each known difference between conveyord and the protocol document
(``server-behavior.md`` §15) has exactly one check that sees it, annotated with a
``divergence`` note. Against conveyord started with the upstream conformance
harness's settings (``--dev``, lease 2 s, reap 500 ms, promote 300 ms, group size 3,
grace 500 ms, sweep 300 ms; ``GOMAXPROCS=4``), a run of the ``server`` family gives:

* ``--profile strict``: every id in :data:`KNOWN_DIFFERENCES` is ``fail``, nothing else fails;
* ``--profile upstream``: each of them is ``divergence``, nothing fails or errors;
* either profile: each id in :data:`OPTIONAL_ABSENT` is ``optional-fail`` (behaviour the protocol
  document does not require, which conveyord does not have; never a failed run).

The interop tests import :func:`expected_failures` / :func:`expected_status` and assert
exactly that, so a new upstream difference (or a check that stops seeing one) shows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from conveyor_conformance.model import CheckResult, Status

__all__ = [
    "KNOWN_DIFFERENCES",
    "NOT_APPLICABLE",
    "OPTIONAL_ABSENT",
    "expected_failures",
    "expected_status",
    "verdict_problems",
]

# check id -> the server-behavior.md §15 item it shows (the check's own divergence note says more)
KNOWN_DIFFERENCES: Mapping[str, str] = {
    "server.6.1.task-id-idempotent": "15.1",
    "server.5.8.outcome-unspecified-treated-as-released": "15.2",
    "server.5.5.credits-never-exceeded": "15.3",
    "server.5.2.weights-share-worker-capacity": "15.4",
    "server.5.3.welcome-before-any-dispatch": "15.8",
}

# optional checks conveyord fails (seen in a run against a --dev node, lease 2 s): check id -> what it does
OPTIONAL_ABSENT: Mapping[str, str] = {
    "server.5.10.silent-session-closed-without-charge": (
        "keeps a silent session open; its task's lease lapses and is charged a retry"
    ),
    "server.5.6.reclaimed-task-goes-elsewhere": (
        "hands a lapsed task straight back to the session it lapsed in (SWRR by weight)"
    ),
}

# n/a against a --dev conveyord without --token: its version is "(devel)" (§15.9), auth is off
NOT_APPLICABLE: frozenset[str] = frozenset(
    {
        "server.8.min-server-version-enforced",
        "server.2.unary-missing-token-unauthenticated",
        "server.2.unary-wrong-token-unauthenticated",
        "server.2.session-missing-token-unauthenticated",
        "server.2.session-wrong-token-unauthenticated",
        "server.2.valid-token-accepted",
    }
)


def expected_failures(profile: str = "strict") -> frozenset[str]:
    """Ids that fail against conveyord: the known differences (strict), none (upstream)."""
    return frozenset() if profile == "upstream" else frozenset(KNOWN_DIFFERENCES)


def expected_status(check_id: str, profile: str = "strict", *, with_token: bool = False) -> Status:
    """The status ``check_id`` should get against conveyord under ``profile``."""
    if check_id in KNOWN_DIFFERENCES:
        return Status.DIVERGENCE if profile == "upstream" else Status.FAIL
    if check_id in OPTIONAL_ABSENT:
        return Status.OPTIONAL_FAIL
    if check_id in NOT_APPLICABLE and not (with_token and check_id.startswith("server.2.")):
        return Status.NOT_APPLICABLE
    return Status.PASS


def verdict_problems(
    results: Iterable[CheckResult], profile: str = "strict", *, with_token: bool = False
) -> dict[str, str]:
    """Results that differ from the expected verdict: id -> 'got X, want Y: detail' (empty = as expected).

    A ``divergence`` must also name its §15 item in the result's note.
    """
    problems: dict[str, str] = {}
    for r in results:
        want = expected_status(r.id, profile, with_token=with_token)
        if r.status is not want:
            problems[r.id] = f"got {r.status.value}, want {want.value}: {r.detail}"
        elif want is Status.DIVERGENCE and f"§{KNOWN_DIFFERENCES[r.id]}" not in r.divergence:
            problems[r.id] = f"divergence note {r.divergence!r} does not name §{KNOWN_DIFFERENCES[r.id]}"
    return problems
