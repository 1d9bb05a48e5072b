"""Reporters: rich table for humans, JSON and JUnit XML for machines.

Known upstream divergences get their own column so they are visible, never hidden.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from conveyor_conformance.model import Status, Summary

__all__ = ["render_table", "to_json", "to_junit", "write_json", "write_junit"]

_STYLE = {
    Status.PASS: "green",
    Status.FAIL: "bold red",
    Status.ERROR: "bold red",
    Status.NOT_APPLICABLE: "yellow",
    Status.DIVERGENCE: "magenta",
    Status.OPTIONAL_FAIL: "blue",
}


def render_table(summary: Summary, console: Console) -> None:
    """Print one row per check and a totals line."""
    table = Table(title=f"conveyor.v1 conformance — {summary.target} (profile {summary.profile})")
    table.add_column("check", style="cyan", no_wrap=True)
    table.add_column("§", no_wrap=True)
    table.add_column("result", no_wrap=True)
    table.add_column("known divergence")
    table.add_column("detail")
    for r in summary.results:
        label = f"[{_STYLE[r.status]}]{r.status.value}[/]"
        div = r.divergence if (r.divergence and summary.profile == "upstream") else ""
        table.add_row(r.id, r.section, label, escape(div), escape(r.detail or r.description))
    console.print(table)
    console.print(totals_line(summary))


def totals_line(summary: Summary) -> str:
    """``N checks: P passed, F failed, ...`` plus the verdict."""
    parts = [f"{summary.count(s)} {name}" for s, name in _NAMES if summary.count(s)]
    verdict = "OK" if summary.ok else "FAILED"
    return f"{len(summary.results)} checks: {', '.join(parts) or 'none'} — {verdict}"


_NAMES = (
    (Status.PASS, "passed"),
    (Status.FAIL, "failed"),
    (Status.ERROR, "errored"),
    (Status.NOT_APPLICABLE, "not applicable"),
    (Status.DIVERGENCE, "known divergences"),
    (Status.OPTIONAL_FAIL, "optional behaviours absent"),
)


def to_json(summary: Summary) -> dict[str, object]:
    """The JSON report as a mapping."""
    return {
        "target": summary.target,
        "profile": summary.profile,
        "ok": summary.ok,
        "counts": {s.value: summary.count(s) for s in Status},
        "results": [r.to_dict() for r in summary.results],
    }


def write_json(summary: Summary, path: str | Path) -> None:
    """Write the JSON report to ``path``."""
    Path(path).write_text(json.dumps(to_json(summary), indent=2) + "\n", encoding="utf-8")


def to_junit(summary: Summary) -> ET.Element:
    """A JUnit XML ``<testsuites>`` tree: failures, errors, and skips (n/a, divergences, optional)."""
    failures = summary.count(Status.FAIL)
    errors = summary.count(Status.ERROR)
    skipped = sum(summary.count(s) for s in (Status.NOT_APPLICABLE, Status.DIVERGENCE, Status.OPTIONAL_FAIL))
    total_time = sum(r.duration for r in summary.results)
    attrs = {
        "name": "conveyor-conformance",
        "tests": str(len(summary.results)),
        "failures": str(failures),
        "errors": str(errors),
        "skipped": str(skipped),
        "time": f"{total_time:.3f}",
    }
    root = ET.Element("testsuites", attrs)
    suite = ET.SubElement(root, "testsuite", attrs)
    for r in summary.results:
        case = ET.SubElement(
            suite,
            "testcase",
            {"classname": f"conformance.{r.family}", "name": r.id, "time": f"{r.duration:.3f}"},
        )
        ET.SubElement(case, "properties").extend(
            [ET.Element("property", {"name": "section", "value": r.section})]
        )
        if r.status is Status.FAIL:
            ET.SubElement(case, "failure", {"message": r.detail[:500]}).text = r.detail
        elif r.status is Status.ERROR:
            ET.SubElement(case, "error", {"message": r.detail[:500]}).text = r.detail
        elif r.status is Status.NOT_APPLICABLE:
            ET.SubElement(case, "skipped", {"message": r.detail})
        elif r.status is Status.DIVERGENCE:
            ET.SubElement(
                case, "skipped", {"message": f"known upstream divergence: {r.divergence}"}
            ).text = r.detail
        elif r.status is Status.OPTIONAL_FAIL:
            ET.SubElement(case, "skipped", {"message": "optional behaviour absent"}).text = r.detail
    return root


def write_junit(summary: Summary, path: str | Path) -> None:
    """Write the JUnit XML report to ``path``."""
    tree = ET.ElementTree(to_junit(summary))
    ET.indent(tree)
    tree.write(str(path), encoding="utf-8", xml_declaration=True)
