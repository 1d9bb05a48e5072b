"""A child with a sync handler has its thread pool's first thread before it reports Ready.

Without it the first job of each child paid for starting that thread (a few ms, more on a loaded
machine), and a warm child could run one queue's short tasks back to back meanwhile, skewing the
weighted share of the first starts (docs/interop.md, "Queue weights, measured").
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import asyncio, os, sys, threading
    from conveyor_sdk._runtime import pipe
    from conveyor_sdk._runtime.child import ChildLoop
    from conveyor_sdk._worker.registry import Registry

    reg = Registry()
    if sys.argv[1] == "sync":
        @reg.handler("t")
        def handler(task, ctx):
            return None
    else:
        @reg.handler("t")
        async def handler(task, ctx):
            return None

    to_child_r, _to_child_w = os.pipe()
    from_child_r, from_child_w = os.pipe()

    def watch():  # the supervisor's side: read frames until Ready, then look at the threads
        frames = pipe.FrameReader()
        while True:
            for message in frames.feed(os.read(from_child_r, 65536)):
                if isinstance(message, pipe.Ready):
                    names = [t.name for t in threading.enumerate()]
                    print("pool threads at Ready:", sum(n.startswith("conveyor-sync") for n in names))
                    sys.stdout.flush()
                    os._exit(0)

    threading.Thread(target=watch, daemon=True).start()
    asyncio.run(ChildLoop(reg, to_child_r, from_child_w, capacity=2, beat=5.0).serve())
    """
)


@pytest.mark.parametrize(("kind", "threads"), [("sync", 1), ("async", 0)])
def test_pool_thread_exists_before_ready(kind: str, threads: int) -> None:
    """Sync handlers: one pool thread is running when Ready is sent; async only: none is started."""
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, kind], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"pool threads at Ready: {threads}" in done.stdout, done.stdout + done.stderr[-2000:]
