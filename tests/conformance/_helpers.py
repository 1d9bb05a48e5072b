"""Helpers for running the suite from tests: worker commands and shared-server runs."""

from __future__ import annotations

import asyncio
import dataclasses
import sys
from collections.abc import Sequence

from conveyor_conformance import SuiteConfig, SuiteEnv, default_registry, prepared_env, run_checks
from conveyor_conformance.model import CheckResult

RAW_WORKER = f"{sys.executable} -m conveyor_conformance.mutants.raw_worker"
SDK_WORKER = f"{sys.executable} -m conveyor_conformance.worker_program"


def failing(results: Sequence[CheckResult]) -> dict[str, str]:
    """Id -> detail of every failing result."""
    return {r.id: f"{r.status.value}: {r.detail}" for r in results if r.status.failing}


async def run_variants(
    variants: dict[str, tuple[Sequence[str], str, dict[str, str]]],
    *,
    concurrency: int = 8,
    declares: tuple[str, ...] | None = None,
) -> dict[str, list[CheckResult]]:
    """Run several (check ids, worker command, worker env) variants against one started server.

    Each variant reads its own program's declaration line unless ``declares`` is given.
    """
    import shlex

    reg = default_registry()
    every = [reg.get(i) for ids, _, _ in variants.values() for i in ids]
    config = SuiteConfig(concurrency=concurrency, declares=declares)
    async with prepared_env(config, every) as base:
        gate = asyncio.Semaphore(concurrency)

        async def one(ids: Sequence[str], cmd: str, extra: dict[str, str]) -> list[CheckResult]:
            env: SuiteEnv = dataclasses.replace(base, worker_cmd=shlex.split(cmd), worker_env=dict(extra))
            env = dataclasses.replace(env, config=dataclasses.replace(config, concurrency=len(ids)))
            async with gate:
                return await run_checks([reg.get(i) for i in ids], env)

        names = list(variants)
        outs = await asyncio.gather(*(one(*variants[n]) for n in names))
    return dict(zip(names, outs, strict=True))
