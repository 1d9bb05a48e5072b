"""Run selected checks, concurrently where independent, and classify each outcome.

``run_checks`` is pure orchestration: it needs a prepared :class:`SuiteEnv`
(see :mod:`conveyor_conformance.harness` for starting servers) and returns one
:class:`CheckResult` per check, in selection order.
"""

from __future__ import annotations

import asyncio
import logging
import time
import traceback
from collections.abc import Callable, Sequence

from conveyor_conformance.context import CheckContext, SuiteEnv
from conveyor_conformance.model import Check, CheckFailed, CheckResult, NotApplicable, Status
from conveyor_sdk.errors import ConveyorError

__all__ = ["run_check", "run_checks"]

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

    async def one(item: Check) -> CheckResult:
        async with gate:
            result = await run_check(item, env)
        if on_result is not None:
            on_result(result)
        return result

    return list(await asyncio.gather(*(one(c) for c in checks)))


async def run_check(item: Check, env: SuiteEnv) -> CheckResult:
    """Run one check and turn what happened into a CheckResult."""
    missing = env.missing(item.requires)
    if missing:
        return _result(item, Status.NOT_APPLICABLE, missing, 0.0, env)
    ctx = CheckContext(env, item)
    started = time.monotonic()
    try:
        detail = await asyncio.wait_for(item.fn(ctx), item.timeout * env.config.timing_scale)
        status, text = Status.PASS, detail or ""
    except CheckFailed as exc:
        status, text = Status.FAIL, str(exc)
    except NotApplicable as exc:
        status, text = Status.NOT_APPLICABLE, str(exc)
    except TimeoutError:
        status, text = Status.ERROR, f"check timed out after {item.timeout:g}s"
    except ConveyorError as exc:
        status, text = Status.FAIL, f"unexpected {exc.code.connect_name}: {exc.message}"
    except Exception as exc:  # isolation point: one broken check must not stop the run
        log.debug("check %s crashed:\n%s", item.id, traceback.format_exc())
        status, text = Status.ERROR, f"{type(exc).__name__}: {exc}"
    finally:
        await ctx.aclose()
    if ctx.notes and status is Status.PASS:
        text = "; ".join([text, *ctx.notes]) if text else "; ".join(ctx.notes)
    return _result(item, status, text, time.monotonic() - started, env)


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
