"""Run selected checks, concurrently where independent, and classify each outcome.

``run_checks`` is pure orchestration: it needs a prepared :class:`SuiteEnv`
(see :mod:`conveyor_conformance.harness` for starting servers) and returns one
:class:`CheckResult` per check, in selection order.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import traceback
from collections.abc import Callable, Sequence

from conveyor_conformance.context import CheckContext, SuiteEnv
from conveyor_conformance.declare import ensure_declarations
from conveyor_conformance.model import (
    Check,
    CheckFailed,
    CheckResult,
    NotApplicable,
    OptionalAbsent,
    Requirement,
    Status,
)
from conveyor_sdk.errors import ConveyorError

__all__ = ["one_line", "run_check", "run_checks"]

log = logging.getLogger("conveyor.conformance")

ResultCallback = Callable[[CheckResult], None]


async def run_checks(
    checks: Sequence[Check],
    env: SuiteEnv,
    *,
    on_result: ResultCallback | None = None,
) -> list[CheckResult]:
    """Run ``checks`` with at most ``env.config.concurrency`` at once."""
    gate = asyncio.Semaphore(max(1, env.config.concurrency))
    if any(c.declares or Requirement.WORKER_CMD in c.requires for c in checks):
        await ensure_declarations(env)

    async def one(item: Check) -> CheckResult:
        async with gate:
            result = await run_check(item, env)
        if on_result is not None:
            on_result(result)
        return result

    return list(await asyncio.gather(*(one(c) for c in checks)))


async def run_check(item: Check, env: SuiteEnv) -> CheckResult:
    """Run one check and turn what happened into a CheckResult."""
    missing = env.missing(item.requires) or env.undeclared(item.declares)
    if missing:
        return _result(item, Status.NOT_APPLICABLE, missing, 0.0, env)
    ctx = CheckContext(env, item)
    started = time.monotonic()
    try:
        status, text = await _outcome(item, ctx)
    finally:
        with contextlib.suppress(Exception):  # aclose never raises; belt and braces for the run
            await ctx.aclose()
    if ctx.notes and status is Status.PASS:
        text = "; ".join([text, *ctx.notes]) if text else "; ".join(ctx.notes)
    return _result(item, status, text, time.monotonic() - started, env)


async def _outcome(item: Check, ctx: CheckContext) -> tuple[Status, str]:
    """Run the check function; every way it can end becomes a status (never an exception)."""
    limit = item.timeout * ctx.scale
    try:
        detail = await asyncio.wait_for(item.fn(ctx), limit)
    except CheckFailed as exc:
        absent = item.optional and isinstance(exc, OptionalAbsent)  # see registry.check(optional=)
        return Status.OPTIONAL_FAIL if absent else Status.FAIL, str(exc)
    except NotApplicable as exc:
        return Status.NOT_APPLICABLE, str(exc)
    except TimeoutError:
        return Status.ERROR, f"check timed out after {limit:g}s"
    except ConveyorError as exc:
        return Status.FAIL, one_line(f"unexpected {exc.code.connect_name}: {exc.message}")
    except (Exception, asyncio.CancelledError) as exc:  # isolation point: a broken check never stops the run
        task = asyncio.current_task()
        if isinstance(exc, asyncio.CancelledError) and task is not None and task.cancelling():
            raise  # the run itself is being cancelled
        log.debug("check %s crashed:\n%s", item.id, traceback.format_exc())
        return Status.ERROR, one_line(f"check crashed: {type(exc).__name__}: {exc}")
    return Status.PASS, detail if isinstance(detail, str) else ""


def one_line(text: str, limit: int = 300) -> str:
    """``text`` on one line, at most ``limit`` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _result(item: Check, status: Status, detail: str, duration: float, env: SuiteEnv) -> CheckResult:
    if status.failing and item.divergence and env.config.profile == "upstream":
        status = Status.DIVERGENCE
    return CheckResult(
        id=item.id,
        section=item.section,
        description=item.description,
        family=item.family.value,
        status=status,
        detail=detail,
        divergence=item.divergence,
        duration=duration,
    )
