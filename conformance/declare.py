"""What a worker program supports beyond the upstream environment contract, and how it says so.

The upstream contract (``CONVEYOR_ADDR``, ``SCENARIO``, ``SLEEP_MS``, ``QUEUE``; types
``conformance:task`` and ``conformance:batch``) is all the suite assumes. Everything
else is an *extension* that a program declares, in one of two ways:

* the program prints one line before it opens its session, on stdout or stderr::

      conveyor-conformance: supports CONCURRENCY CONVEYOR_TOKEN conformance:fail

  (names separated by spaces or commas; the line may carry a logger prefix);
* or the person running the suite passes ``--worker-declares NAME[,NAME...]``
  (``none`` for nothing), which replaces the printed line.

Without either, the suite starts the program once against a silent scripted peer
and reads its output until the program opens a session, exits, or 30 s pass. A check
needing an undeclared extension reports ``n/a (program does not declare X)``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from conveyor_conformance.context import SuiteEnv

__all__ = [
    "DECLARATION_PREFIX",
    "EXTENSIONS",
    "ensure_declarations",
    "parse_declaration",
    "parse_names",
    "probe_declarations",
]

DECLARATION_PREFIX = "conveyor-conformance:"

EXTENSIONS: dict[str, str] = {
    "CONCURRENCY": "reads CONCURRENCY (the Hello.concurrency to declare)",
    "CONVEYOR_TOKEN": "reads CONVEYOR_TOKEN and sends it as Authorization: Bearer",
    "DRAIN_GRACE_S": "reads DRAIN_GRACE_S (seconds a drain lets handlers finish before releasing them)",
    "conformance:cancellable": "sleeps SLEEP_MS but stops as soon as the SDK cancels the handler",
    "conformance:fail": "raises (throws, panics) an error whose message contains the payload's marker",
    "conformance:skip": "returns the SDK's permanent-failure (skip retry) sentinel",
    "conformance:json": "decodes the payload by its content_type; may return it re-encoded as JSON",
}

_LINE = re.compile(re.escape(DECLARATION_PREFIX) + r"\s*supports\b(.*)$", re.MULTILINE)
PROBE_TIMEOUT = 30.0


def parse_names(text: str) -> frozenset[str]:
    """Names in a declaration body or a ``--worker-declares`` value (``none`` = nothing)."""
    names = {n for n in re.split(r"[\s,]+", text.strip()) if n}
    return frozenset(names - {"none"})


def parse_declaration(output: str) -> frozenset[str] | None:
    """The names of the first declaration line in ``output``, or None when there is none."""
    found = _LINE.search(output)
    return None if found is None else parse_names(found.group(1))


async def ensure_declarations(env: SuiteEnv) -> None:
    """Fill ``env.declared`` once: from the config, else by probing the worker program."""
    if env.declared is not None:
        return
    if env.config.declares is not None:
        env.declared = parse_names(",".join(env.config.declares))
        env.declared_from = "--worker-declares"
    elif env.worker_cmd:
        found, how = await probe_declarations(env.worker_cmd, env.worker_env)
        env.declared, env.declared_from = found, how
    else:
        env.declared, env.declared_from = frozenset(), "no worker program"
    unknown = sorted(n for n in env.declared if n not in EXTENSIONS)
    if unknown:
        env.notes.append(f"the worker program declares unknown extensions {unknown} (ignored)")


async def probe_declarations(cmd: Iterable[str], extra_env: dict[str, str]) -> tuple[frozenset[str], str]:
    """Start ``cmd`` against a silent ScriptedPeer and read its declaration line.

    Stops at the first of: a declaration line, a session opened (then 0.5 s more for
    buffered output), the program's exit, or :data:`PROBE_TIMEOUT`. Returns the names
    and a short note of where they came from.
    """
    from conveyor_sdk.testing import ScriptedPeer

    async with ScriptedPeer() as peer:
        env = {**os.environ, **extra_env, "CONVEYOR_ADDR": peer.url, "SCENARIO": "sleep"}
        env.update({"SLEEP_MS": "0", "QUEUE": "cf-declaration-probe"})
        proc = await asyncio.create_subprocess_exec(
            *cmd,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        output = bytearray()
        try:
            await _read_until_declared(proc, peer, output)
        finally:
            await peer.aclose()  # a program waiting for Welcome sees the drop, then gets SIGTERM
            await _stop(proc)
    found = parse_declaration(output.decode(errors="replace"))
    if found is None:
        return frozenset(), "the program printed no declaration line"
    return found, "the program's declaration line"


async def _read_until_declared(proc: asyncio.subprocess.Process, peer: object, output: bytearray) -> None:
    assert proc.stdout is not None
    loop = asyncio.get_running_loop()
    end = loop.time() + PROBE_TIMEOUT
    connected_at: float | None = None
    while loop.time() < end:
        if _LINE.search(output.decode(errors="replace")):
            return
        if connected_at is None and getattr(peer, "sessions_opened", 0):
            connected_at = loop.time()
        if connected_at is not None and loop.time() - connected_at > 0.5:
            return
        try:
            chunk = await asyncio.wait_for(proc.stdout.read(4096), 0.1)
        except TimeoutError:
            continue
        if not chunk:
            return  # the program exited (or closed its output) without declaring
        output += chunk


async def _stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), 10)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
    if proc.stdout is not None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(proc.stdout.read(), 2)
    transport = getattr(proc, "_transport", None)
    if transport is not None:
        transport.close()
