"""The docs' images exist, each image in docs/img is shown somewhere, and the screenshot script makes them."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
IMG = ROOT / "docs" / "img"


def _referenced() -> set[Path]:
    found = set()
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", doc.read_text()):
            found.add((doc.parent / target).resolve())
    return found


def test_every_image_link_resolves_and_every_image_is_linked() -> None:
    """No broken image in README or docs/, and no screenshot in docs/img that nothing shows."""
    referenced = _referenced()
    missing = sorted(str(p.relative_to(ROOT)) for p in referenced if not p.exists())
    assert not missing, missing
    unused = sorted(p.name for p in IMG.glob("*.png") if p.resolve() not in referenced)
    assert not unused, unused


def test_the_screenshot_script_writes_every_dashboard_image() -> None:
    """scripts/dashboard_screenshots.py names each docs/img/dashboard-*.png (so all can be regenerated)."""
    script = (ROOT / "scripts" / "dashboard_screenshots.py").read_text()
    named = set(re.findall(r'\("([a-z-]+)", f?"/', script)) | set(
        re.findall(r'"dashboard-([a-z-]+)\.png"', script)
    )
    shots = {p.stem.removeprefix("dashboard-") for p in IMG.glob("dashboard-*.png")}
    assert shots <= named, sorted(shots - named)
