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
from conveyor_cli._client_render import Output, console, emit_json, result_dicts, task_dict
from conveyor_sdk._client.options import MAX_BATCH, build_request
from conveyor_sdk.client import SyncClient, TaskSpec
from conveyor_sdk.codecs import CodecRegistry
from conveyor_sdk.types import EnqueueResult

__all__ = ["read_specs", "run_batch"]


def read_specs(file: Path) -> list[tuple[int, TaskSpec]]:
    """(line number, TaskSpec) for every non-blank line; ValueError names the bad line."""
    try:
        text = sys.stdin.read() if str(file) == "-" else file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read {file}: {exc}") from None
    specs = [(n, parse_line(line, n)) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    if not specs:
        raise ValueError(f"{file} holds no tasks")
    codecs = CodecRegistry.default()
    for number, spec in specs:  # validate everything before the first request
        try:
            build_request(spec.type, spec.payload, spec.options, codecs)
        except ValueError as exc:
            raise ValueError(f"line {number}: {exc}") from None
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
        console.print(f"enqueued {len(results) - len(failed)} of {len(results)} task(s)")
        for number, error in failed:
            console.print(f"  line {number}: {error}", markup=False)
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
            console.print(f"enqueued {len(committed)} task(s) atomically")
        return 0
    return _report(lines, _send_batches(client, specs, chunk), output)
