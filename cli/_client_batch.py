"""``conveyor enqueue-batch``: parse a JSONL file, send chunks of <= 1000, report per-line results.

Every line is parsed and validated before the first request, so a typo on line
9,000 does not leave 8,999 tasks half-enqueued. EnqueueBatch items fail
independently (the command exits 1 when any failed); ``--tx`` uses EnqueueTx
(all or nothing) and therefore accepts at most 1000 lines.
"""

from __future__ import annotations

import sys
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from conveyor_cli._client_options import parse_line
from conveyor_cli._client_render import Output, emit_json, result_dicts, stdout_console, table, task_dict
from conveyor_sdk._client.options import MAX_BATCH, build_request
from conveyor_sdk.client import SyncClient, TaskSpec
from conveyor_sdk.codecs import CodecRegistry
from conveyor_sdk.types import EnqueueResult

__all__ = ["BadLines", "read_specs", "run_batch"]


class BadLines(ValueError):
    """Some lines of a JSONL file are invalid; ``problems`` holds every ``line N: reason``."""

    def __init__(self, file: Path, problems: list[str]) -> None:
        self.problems = problems
        if len(problems) == 1:
            super().__init__(f"{problems[0]} (nothing was sent)")
        else:
            where = "stdin" if str(file) == "-" else str(file)
            super().__init__(f"{len(problems)} bad lines in {where}; nothing was sent")


def _check_line(line: str, number: int, codecs: CodecRegistry) -> TaskSpec:
    spec = parse_line(line, number)
    try:
        build_request(spec.type, spec.payload, spec.options, codecs)
    except ValueError as exc:
        raise ValueError(f"line {number}: {exc}") from None
    return spec


def read_specs(file: Path) -> list[tuple[int, TaskSpec]]:
    """(line number, TaskSpec) for every non-blank line, all validated before anything is sent.

    Raises :class:`BadLines` naming every bad line (number and reason), not just the first.
    """
    try:
        text = sys.stdin.read() if str(file) == "-" else file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read {file}: {exc}") from None
    codecs = CodecRegistry.default()
    specs: list[tuple[int, TaskSpec]] = []
    problems: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            specs.append((number, _check_line(line, number, codecs)))
        except ValueError as exc:
            problems.append(str(exc))
    if problems:
        raise BadLines(file, problems)
    if not specs:
        raise ValueError(f"{file} holds no tasks")
    return specs


def _progress(total: int) -> Progress:
    from conveyor_cli._common import err_console

    return Progress(
        TextColumn("enqueue"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
        console=err_console, transient=True, disable=total <= MAX_BATCH,
    )  # fmt: skip


def _send_batches(client: SyncClient, specs: list[tuple[int, TaskSpec]], chunk: int) -> list[EnqueueResult]:
    results: list[EnqueueResult] = []
    with _progress(len(specs)) as progress:
        bar = progress.add_task("enqueue", total=len(specs))
        for start in range(0, len(specs), chunk):
            part = [spec for _, spec in specs[start : start + chunk]]
            results.extend(client.enqueue_batch(part))
            progress.advance(bar, len(part))
    return results


def _report(lines: list[int], results: list[EnqueueResult], output: Output) -> int:
    failed = [(n, r.error) for n, r in zip(lines, results, strict=True) if not r.ok]
    if output is Output.json:
        emit_json([{"line": n, **d} for n, d in zip(lines, result_dicts(results), strict=True)])
    else:
        stdout_console().print(f"enqueued {len(results) - len(failed)} of {len(results)} task(s)")
        for number, error in failed:
            stdout_console().print(f"  line {number}: {error}", markup=False)
    return len(failed)


def run_batch(client: SyncClient, file: Path, *, tx: bool, chunk: int, output: Output) -> int:
    """Send the file; returns how many tasks were not enqueued."""
    if not 1 <= chunk <= MAX_BATCH:
        raise ValueError(f"--chunk-size must be in 1..{MAX_BATCH}, got {chunk}")
    specs = read_specs(file)
    lines = [n for n, _ in specs]
    if tx:
        if len(specs) > MAX_BATCH:
            raise ValueError(
                f"--tx is atomic per request: at most {MAX_BATCH} tasks, the file has {len(specs)}"
            )
        committed = client.enqueue_tx([spec for _, spec in specs])
        if output is Output.json:
            emit_json(
                [{"line": n, "ok": True, "task": task_dict(t)} for n, t in zip(lines, committed, strict=True)]
            )
        else:
            rows = (
                (t.id, n, t.queue, t.type, t.state.name.lower())
                for n, t in zip(lines, committed, strict=True)
            )
            stdout_console().print(table("committed", ("id", "line", "queue", "type", "state"), rows))
            stdout_console().print(f"enqueued {len(committed)} task(s) atomically")
        return 0
    return _report(lines, _send_batches(client, specs, chunk), output)
