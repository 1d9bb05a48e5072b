"""conveyor_conformance: the executable conveyor.v1 conformance suite.

Use it from the command line (``conveyor conformance run``) or from Python::

    import asyncio
    from conveyor_conformance import SuiteConfig, run_suite

    summary = asyncio.run(run_suite(SuiteConfig(only=("server.5",))))
    assert summary.ok, summary.failed_ids()

Three families of checks: ``server.*`` (raw frames and unary calls against a
server), ``sdk.*`` (a worker program against a scripted peer, one check per
checklist §9 item) and ``worker.*`` (the cross-SDK environment contract).
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from conveyor_conformance.context import CheckContext, SuiteConfig, SuiteEnv
    from conveyor_conformance.harness import prepared_env, run_suite
    from conveyor_conformance.model import (
        Check,
        CheckFailed,
        CheckResult,
        Family,
        NotApplicable,
        OptionalAbsent,
        Requirement,
        Status,
        Summary,
    )
    from conveyor_conformance.registry import Registry, check, default_registry
    from conveyor_conformance.runner import run_check, run_checks

# Loaded on first use, not on import: the worker programs a run starts (``python -m
# conveyor_conformance.mutants.raw_worker``, ``.worker_program``) import this package first, and need
# none of the harness (httpx, the checks); each start would otherwise pay for all of it.
_HOME = {
    **dict.fromkeys(["CheckContext", "SuiteConfig", "SuiteEnv"], "context"),
    **dict.fromkeys(["prepared_env", "run_suite"], "harness"),
    **dict.fromkeys(
        [
            "Check",
            "CheckFailed",
            "CheckResult",
            "Family",
            "NotApplicable",
            "OptionalAbsent",
            "Requirement",
            "Status",
            "Summary",
        ],
        "model",
    ),
    **dict.fromkeys(["Registry", "check", "default_registry"], "registry"),
    **dict.fromkeys(["run_check", "run_checks"], "runner"),
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


__all__ = [
    "Check",
    "CheckContext",
    "CheckFailed",
    "CheckResult",
    "Family",
    "NotApplicable",
    "OptionalAbsent",
    "Registry",
    "Requirement",
    "Status",
    "SuiteConfig",
    "SuiteEnv",
    "Summary",
    "check",
    "default_registry",
    "prepared_env",
    "run_check",
    "run_checks",
    "run_suite",
]
