"""Start worker programs (the environment contract) as real subprocesses, owned by a check."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Mapping

from conveyor_conformance.context import CheckContext

__all__ = ["WorkerProcess", "start_worker"]


class WorkerProcess:
    """A running worker program; output is collected for failure details."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.output = bytearray()
        self._reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        while chunk := await self.proc.stdout.read(4096):
            self.output += chunk

    def tail(self, lines: int = 6) -> str:
        """Last lines of the program's output, for details."""
        text = self.output.decode(errors="replace").strip().splitlines()
        return " | ".join(text[-lines:])

    def terminate(self) -> None:
        """Send SIGTERM (drain)."""
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)

    async def wait(self, within: float) -> int | None:
        """Exit code, or None if still running after ``within`` seconds."""
        try:
            code = await asyncio.wait_for(self.proc.wait(), within)
        except TimeoutError:
            return None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._reader, 1)
        return code

    async def aclose(self) -> None:
        """Stop the program (SIGTERM, then SIGKILL) and reap it.

        It fits the check's 10 s closer budget (``CheckContext.aclose``): a program slow to drain is
        killed after 5 s, and if the budget still runs out, closing the transport kills it, so no
        program outlives its check (a leaked one surfaced later as an unclosed-transport warning).
        """
        try:
            if self.proc.returncode is None:
                self.terminate()
                if await self.wait(5) is None:
                    self.proc.kill()
                    await self.proc.wait()
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(self._reader, 2)  # read to EOF so the pipe closes
        finally:
            transport = getattr(self.proc, "_transport", None)
            if transport is not None:  # kills a program still running, closes its pipes
                transport.close()
        await asyncio.sleep(0)


async def start_worker(
    ctx: CheckContext,
    *,
    addr: str,
    scenario: str = "sleep",
    sleep_ms: int = 0,
    extra: Mapping[str, str] | None = None,
) -> WorkerProcess:
    """Start ``env.worker_cmd`` with the contract's environment; stopped when the check ends.

    Against a server that requires a token, a program that does not declare ``CONVEYOR_TOKEN``
    makes the check n/a (it could not authenticate).
    """
    cmd = ctx.env.worker_cmd
    assert cmd, "no worker command"
    if addr == ctx.env.url and ctx.env.token and scenario != "bad-hello":
        ctx.need("CONVEYOR_TOKEN", "the server under test requires a bearer token")
    env = dict(os.environ)
    env.update(ctx.env.worker_env)
    env.update({"CONVEYOR_ADDR": addr, "SCENARIO": scenario, "SLEEP_MS": str(sleep_ms), "QUEUE": ctx.queue})
    env.pop("CONVEYOR_TOKEN", None)
    if ctx.env.token:
        env["CONVEYOR_TOKEN"] = ctx.env.token
    if ctx.env.config.ca_file:  # a foreign program may ignore it; an https:// target then fails its checks
        env["CONVEYOR_CA_FILE"] = ctx.env.config.ca_file
    env.update(dict(extra or {}))
    proc = await asyncio.create_subprocess_exec(
        *cmd,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    worker = WorkerProcess(proc)
    ctx.on_close(worker.aclose)
    return worker
