"""Noticing that a refusing server listens again while a long reconnect wait runs.

§5.9's backoff exists so that workers do not storm a server that is up but failing: each failed
session set-up doubles the wait, up to 30 s. When the failure was that nothing listened at the
address (connection refused, host or network unreachable), there is no server to overload yet,
and a wait of up to 30 s only delays the work once it comes back. So while such a wait is longer
than :data:`MIN_WAIT`, the worker tries a bare TCP connect to each of its addresses every
:data:`INTERVAL` seconds (jittered, so a fleet spreads out) and closes it at once, sending no
byte. The first address that accepts cuts the wait short and the next session attempt goes
there. That attempt is an ordinary one: if it fails once connected (TLS, set-up, a server error),
the failure is not a refusal, no probe runs, and the backoff (never reset before a Welcome) goes
on growing as §5.9 says.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
from collections.abc import Callable, Sequence

from conveyor_sdk._transport._connect import Target, parse_target
from conveyor_sdk.errors import ConveyorError, InvalidArgument

__all__ = ["INTERVAL", "MIN_WAIT", "HealProbe", "refused"]

INTERVAL = 0.6  # mean probe spacing; the draw is uniform in [0.5, 1.5) x this: 0.3 to 0.9 s
MIN_WAIT = 1.0  # a shorter reconnect wait ends before a probe could gain anything
CONNECT_TIMEOUT = 1.0  # a probe that neither connects nor fails this long counts as not accepted
_NOT_LISTENING = frozenset(
    getattr(errno, name)
    for name in ("ECONNREFUSED", "EHOSTUNREACH", "ENETUNREACH", "EHOSTDOWN", "ENETDOWN")
    if hasattr(errno, name)
)


def refused(error: ConveyorError) -> bool:
    """Whether ``error`` says nothing listened at the address (the TCP connect itself failed)."""
    return error.details.get("connect_errno") in _NOT_LISTENING


class HealProbe:
    """One probing run: TCP connects to ``addresses`` until one accepts or :meth:`cancel`.

    ``on_accept(index)`` is called once, with the index of the first address that accepted.
    ``rng`` draws in [0, 1) for the jitter (injected, like the backoff's).
    """

    def __init__(
        self,
        addresses: Sequence[str],
        on_accept: Callable[[int], None],
        rng: Callable[[], float],
        *,
        interval: float = INTERVAL,
    ) -> None:
        self._addresses = tuple(addresses)
        self._on_accept = on_accept
        self._rng = rng
        self._interval = interval
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        if not self.running:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="conveyor-heal-probe")

    def cancel(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()

    async def _run(self) -> None:
        targets: list[Target | None] = []
        for address in self._addresses:
            try:
                targets.append(parse_target(address))
            except InvalidArgument:  # the session attempt itself reports a bad address
                targets.append(None)
        while True:
            await asyncio.sleep(self._interval * (0.5 + self._rng()))
            answers = await asyncio.gather(*(self._accepts(t) for t in targets))
            for index, accepted in enumerate(answers):
                if accepted:
                    self._on_accept(index)
                    return

    @staticmethod
    async def _accepts(target: Target | None) -> bool:
        if target is None:
            return False
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT):
                _, writer = await asyncio.open_connection(target.host, target.port)
        except (OSError, TimeoutError):
            return False
        writer.close()  # nothing was sent: the server sees a connection that ends before its preface
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return True
