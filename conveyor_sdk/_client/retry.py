"""Bounded retry with full-jitter backoff for calls that are safe to repeat (pure decisions).

Only ``unavailable`` is retried, and only for calls whose repetition cannot
create a second task: GetTask and other reads always, Enqueue when it carries a
``task_id``, EnqueueBatch and EnqueueTx when every item carries one (the clients give
every item one by default). Admin mutations are never retried automatically.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk.errors import Code, ConveyorError

__all__ = ["RetryConfig", "can_fail_over", "safe_to_repeat", "should_retry"]


@dataclass(frozen=True, slots=True)
class RetryConfig:
    """How often and how patiently to repeat a safe call after ``unavailable``.

    ``attempts`` counts the first try (1 disables retries). Delay before retry
    *n* (0-based) is ``uniform(0, min(max_delay, base * 2**n))``.
    """

    attempts: int = 4
    base: float = 0.1
    max_delay: float = 2.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"RetryConfig.attempts must be >= 1, got {self.attempts}")
        if self.base < 0 or self.max_delay < 0:
            raise ValueError("RetryConfig delays must not be negative")

    def delay(self, retry_index: int, rand: Callable[[], float] = random.random) -> float:
        """Full-jitter delay in seconds before retry ``retry_index`` (0-based)."""
        ceiling = min(self.max_delay, self.base * 2.0**retry_index)
        return rand() * ceiling


NO_RETRY = RetryConfig(attempts=1)


_READS = frozenset({
    "GetTask", "ListTasks", "ListQueues", "ListWorkerSessions", "ListCron", "ListRateLimits",
    "ListConcurrencyLimits", "ListGroupConfigs", "ClusterInfo", "BrokerInfo",
})  # fmt: skip


def safe_to_repeat(method: str, request: object) -> bool:
    """True when repeating ``method`` with ``request`` cannot duplicate work."""
    if method in _READS:
        return True
    if method == "Enqueue" and isinstance(request, pb.EnqueueRequest):
        return bool(request.task_id)
    if method in ("EnqueueTx", "EnqueueBatch") and isinstance(
        request, pb.EnqueueTxRequest | pb.EnqueueBatchRequest
    ):
        return all(item.task_id for item in request.tasks)
    return False


def should_retry(error: ConveyorError, attempt: int, config: RetryConfig) -> bool:
    """Retry after failed ``attempt`` (1-based) when ``unavailable``, retryable, and budget remains.

    ``retryable`` is False for failures repeating cannot fix (an untrusted certificate, a closed client).
    """
    return error.code is Code.UNAVAILABLE and error.retryable and attempt < config.attempts


def can_fail_over(error: ConveyorError, safe: bool) -> bool:
    """Repeat a failed call on the next server address (pure decision; the caller counts hops).

    ``unavailable`` (retryable) qualifies when the call is safe to repeat, or when the request
    never left this client (``details["not_sent"]``: the connection could not be opened), so
    the other server cannot be asked twice. A server-side verdict (any other code) is final.
    """
    if error.code is not Code.UNAVAILABLE or not error.retryable:
        return False
    return safe or bool(error.details.get("not_sent"))
