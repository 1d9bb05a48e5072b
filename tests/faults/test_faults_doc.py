"""docs/faults.md: its example runs as written (a worker behind a FaultProxy notices a blackhole)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "faults.md"


def test_the_docs_example_runs() -> None:
    """The python block of docs/faults.md exits 0: noticed the blackhole, reconnected after heal."""
    [code] = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    done = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=DOC.parents[1],
    )
    assert done.returncode == 0, done.stdout + done.stderr
