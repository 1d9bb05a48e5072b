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
