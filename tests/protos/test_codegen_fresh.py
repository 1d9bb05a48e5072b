"""The committed generated code is exactly what scripts/gen_protos.py produces from protos/ today."""

from __future__ import annotations

import filecmp
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _files(base: Path) -> set[str]:
    return {str(p.relative_to(base)) for p in base.rglob("*") if p.is_file() and "__pycache__" not in p.parts}


def test_committed_gencode_is_not_stale(tmp_path: Path) -> None:
    """Regenerate into a temp dir and compare every file byte for byte with conveyor_sdk/_gen."""
    out = tmp_path / "_gen"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_protos.py"), str(out)], check=True)
    committed = ROOT / "conveyor_sdk" / "_gen"
    assert _files(out) == _files(committed), "generated file set differs: run scripts/gen_protos.py"
    stale = [
        name for name in sorted(_files(out)) if not filecmp.cmp(out / name, committed / name, shallow=False)
    ]
    assert not stale, f"stale generated code {stale}: run `python scripts/gen_protos.py` and commit"
