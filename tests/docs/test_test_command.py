"""README's test command is what CI runs and CONTRIBUTING quotes; it prints durations, keeps the cache."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _bash_block_after(doc: Path, marker: str) -> str:
    """The one-line ```bash block that follows ``marker`` in ``doc``."""
    text = doc.read_text()
    start = text.index(marker)
    match = re.search(r"```bash\n(.*?)\n```", text[start:], re.DOTALL)
    assert match, f"no bash block after {marker!r} in {doc.name}"
    (line,) = match.group(1).splitlines()
    return line


def _readme_command() -> str:
    return _bash_block_after(ROOT / "README.md", "## Run the tests")


def _pytest_args() -> list[str]:
    """The arguments README's command gives pytest (the last step of the chain)."""
    last = _readme_command().split("&&")[-1]
    argv = shlex.split(last)
    assert argv[0] == ".venv/bin/pytest", argv
    return argv[1:]


def test_ci_and_contributing_run_readmes_command_exactly() -> None:
    """`.ci/run` ends with README's command, and CONTRIBUTING quotes the same line."""
    command = _readme_command()
    ci_lines = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line.strip()]
    assert ci_lines[-1] == command
    assert _bash_block_after(ROOT / "CONTRIBUTING.md", "exactly as CI does") == command


def test_the_suite_runs_in_parallel_and_prints_its_slowest_tests_with_the_cache_on() -> None:
    """README's pytest runs on xdist workers, every run lists its 25 slowest tests, the cache stays on."""
    args = _pytest_args()
    assert "-n" in args, args
    pytest_ini = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    addopts = shlex.split(pytest_ini["addopts"])
    assert "--durations=25" in addopts, addopts
    everything = " ".join([*args, *addopts])
    assert "no:cacheprovider" not in everything and "cache_dir" not in pytest_ini, everything
