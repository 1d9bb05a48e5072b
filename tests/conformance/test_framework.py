"""The suite's machinery: registry selection, outcome classification, profiles and reporters."""

from __future__ import annotations

import asyncio
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conveyor_conformance import (
    CheckFailed,
    NotApplicable,
    OptionalAbsent,
    Registry,
    Requirement,
    Status,
    SuiteConfig,
    SuiteEnv,
    Summary,
    check,
    default_registry,
    run_checks,
)
from conveyor_conformance.context import ServerFacts
from conveyor_conformance.report import to_json, to_junit, write_json, write_junit
from conveyor_sdk.errors import NotFound


def _registry() -> Registry:
    reg = Registry()

    @check("server.1.ok", section="1", description="passes", registry=reg)
    async def ok(ctx: object) -> str:
        return "fine"

    @check("server.1.broken", section="1", description="fails", registry=reg)
    async def broken(ctx: object) -> str:
        raise CheckFailed("server did the wrong thing")

    @check("server.2.crash", section="2", description="crashes", registry=reg)
    async def crash(ctx: object) -> str:
        raise KeyError("oops")

    @check("server.2.na", section="2", description="n/a", registry=reg)
    async def na(ctx: object) -> str:
        raise NotApplicable("not applicable: nothing to see")

    @check("server.2.slow", section="2", description="hangs", registry=reg, timeout=0.2)
    async def slow(ctx: object) -> str:
        await asyncio.sleep(30)
        return "never"

    @check("server.3.rpc-error", section="3", description="unexpected code", registry=reg)
    async def rpc(ctx: object) -> str:
        raise NotFound("no such task")

    @check(
        "server.3.diverges",
        section="3",
        description="known",
        registry=reg,
        divergence="§15.1: upstream differs",
    )
    async def diverges(ctx: object) -> str:
        raise CheckFailed("returned OK")

    @check(
        "worker.4.needs-lease",
        section="4",
        description="lease",
        registry=reg,
        requires=[Requirement.SHORT_LEASE],
    )
    async def needs(ctx: object) -> str:
        return "ran"

    return reg


def _env(profile: str = "strict", lease: float = 60.0) -> SuiteEnv:
    env = SuiteEnv(config=SuiteConfig(profile=profile), url="http://127.0.0.1:1", token=None)
    env.facts = ServerFacts(lease, lease / 3, "v0.1.0", "v0.0.0-0", "01J00000000000000000000000")
    return env


def test_every_outcome_is_classified() -> None:
    """Pass, fail, crash, n/a, timeout, unexpected RPC error and unmet requirements map to their statuses."""
    results = asyncio.run(run_checks(list(_registry()), _env()))
    got = {r.id: r.status for r in results}
    assert got == {
        "server.1.ok": Status.PASS,
        "server.1.broken": Status.FAIL,
        "server.2.crash": Status.ERROR,
        "server.2.na": Status.NOT_APPLICABLE,
        "server.2.slow": Status.ERROR,
        "server.3.rpc-error": Status.FAIL,
        "server.3.diverges": Status.FAIL,
        "worker.4.needs-lease": Status.NOT_APPLICABLE,
    }
    by_id = {r.id: r for r in results}
    assert "needs a 2 s lease" in by_id["worker.4.needs-lease"].detail
    assert "not_found" in by_id["server.3.rpc-error"].detail
    assert "timed out" in by_id["server.2.slow"].detail
    assert not Summary(tuple(results)).ok


def test_upstream_profile_reports_known_divergences_separately() -> None:
    """Under --profile upstream a failing known divergence is DIVERGENCE and does not fail the run."""
    reg = _registry()
    results = asyncio.run(
        run_checks([reg.get("server.3.diverges"), reg.get("server.1.ok")], _env("upstream"))
    )
    assert [r.status for r in results] == [Status.DIVERGENCE, Status.PASS]
    assert results[0].divergence.startswith("§15.1")
    assert Summary(tuple(results), profile="upstream").ok


def test_an_optional_check_that_fails_is_reported_as_such_and_does_not_fail_the_run() -> None:
    """An absent optional behaviour is optional-fail (a JUnit skip); any other failure still fails the run."""
    reg = Registry()

    @check("server.5.optional", section="5", description="optional", registry=reg, optional=True)
    async def absent(ctx: object) -> str:
        raise OptionalAbsent("the server does not do it")

    @check("server.5.optional-setup", section="5", description="setup", registry=reg, optional=True)
    async def setup(ctx: object) -> str:
        raise CheckFailed("no dispatch frame within 10s")

    @check("server.5.optional-crash", section="5", description="crashes", registry=reg, optional=True)
    async def crash(ctx: object) -> str:
        raise KeyError("oops")

    @check("server.5.required", section="5", description="required", registry=reg)
    async def required(ctx: object) -> str:
        raise OptionalAbsent("raised by a check not marked optional")

    results = asyncio.run(run_checks(list(reg), _env("strict")))
    assert [r.status for r in results] == [Status.OPTIONAL_FAIL, Status.FAIL, Status.ERROR, Status.FAIL]
    assert results[0].detail == "the server does not do it"
    assert Summary(results[:1]).ok and not Summary(tuple(results)).ok
    case = to_junit(Summary(results[:1])).find("testsuite/testcase/skipped")
    assert case is not None and case.get("message") == "optional behaviour absent"


def test_short_lease_requirement_met_with_2s_lease() -> None:
    """A check needing a short lease runs when the Welcome said 2 s."""
    reg = _registry()
    results = asyncio.run(run_checks([reg.get("worker.4.needs-lease")], _env(lease=2.0)))
    assert results[0].status is Status.PASS


def test_select_by_id_prefix_glob_and_unknown() -> None:
    """--only accepts exact ids, dotted prefixes and globs; a pattern matching nothing is an error."""
    reg = _registry()
    assert [c.id for c in reg.select(["server.2"])] == ["server.2.crash", "server.2.na", "server.2.slow"]
    assert [c.id for c in reg.select(["*.ok"])] == ["server.1.ok"]
    assert [c.id for c in reg.select(["server.1.ok"])] == ["server.1.ok"]
    with pytest.raises(ValueError, match="no check matches"):
        reg.select(["server.9"])


def test_registry_rejects_duplicate_and_malformed_ids() -> None:
    """Ids are unique and shaped family.section.name."""
    reg = _registry()
    with pytest.raises(ValueError, match="duplicate"):
        check("server.1.ok", section="1", description="again", registry=reg)(_noop)
    with pytest.raises(ValueError, match="malformed"):
        check("server.Bad Id", section="1", description="bad", registry=reg)(_noop)


async def _noop(ctx: object) -> str:
    return ""


def test_every_checklist_item_has_a_named_check() -> None:
    """Each §9 checklist item has at least one sdk.9.* check whose id names it."""
    ids = {c.id for c in default_registry()}
    items = [
        "opens-h2-session-with-bearer",
        "hello-first-with-valid-fields",
        "waits-for-welcome",
        "heartbeat-interval-from-welcome",
        "concurrent-up-to-concurrency-without-credit",
        "one-result-per-dispatch",
        "outcome-mapping",
        "exception-maps-to-retry",
        "heartbeats-every-inflight-id",
        "honours-dispatch-deadline",
        "honours-cancel",
        "tolerates-ping",
        "reconnects-with-full-jitter",
        "reconnect-counter-resets-after-welcome",
        "stops-on-fatal-unauthenticated",
        "stops-on-fatal-protocol-error",
        "closes-stream-on-shutdown",
        "json-payload-byte-compatible",
        "json-payload-producer-bytes",
    ]
    missing = [item for item in items if f"sdk.9.{item}" not in ids]
    assert not missing
    for c in default_registry():
        assert c.section and c.description, c.id


def test_json_and_junit_reports(tmp_path: Path) -> None:
    """JSON carries every result and the verdict; JUnit marks failures, errors and skips."""
    results = asyncio.run(run_checks(list(_registry()), _env("upstream")))
    summary = Summary(tuple(results), profile="upstream", target="unit")
    data = to_json(summary)
    assert data["ok"] is False and len(data["results"]) == 8  # type: ignore[arg-type]
    assert data["counts"] == {"pass": 1, "fail": 2, "error": 2, "n/a": 2, "divergence": 1, "optional-fail": 0}
    root = to_junit(summary)
    suite = root.find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors"), suite.get("skipped")) == (
        "8",
        "2",
        "2",
        "3",
    )
    write_json(summary, tmp_path / "r.json")
    write_junit(summary, tmp_path / "r.xml")
    assert json.loads((tmp_path / "r.json").read_text())["target"] == "unit"
    parsed = ET.parse(tmp_path / "r.xml").getroot()
    names = [case.get("name") for case in parsed.iter("testcase")]
    assert "server.1.broken" in names and len(names) == 8


def _raising_registry() -> Registry:
    reg = Registry()

    @check("sdk.1.json-crash", section="1", description="raises JSONDecodeError", registry=reg)
    async def json_crash(ctx: object) -> str:
        return str(json.loads(b"not json"))

    @check("sdk.1.cancel-crash", section="1", description="raises CancelledError", registry=reg)
    async def cancel_crash(ctx: object) -> str:
        raise asyncio.CancelledError

    @check("sdk.1.multiline-crash", section="1", description="raises with a long message", registry=reg)
    async def multiline(ctx: object) -> str:
        raise RuntimeError("first line\nsecond line\n" + "x" * 1000)

    @check("sdk.1.after", section="1", description="runs after the crashes", registry=reg)
    async def after(ctx: object) -> str:
        return "still ran"

    return reg


def test_a_check_that_raises_is_an_error_with_one_line_and_never_aborts_the_run() -> None:
    """Any exception in a check (even CancelledError) is `error` with a one-line reason; later checks run."""
    env = _env()
    env.declared = frozenset()
    results = asyncio.run(run_checks(list(_raising_registry()), env))
    got = {r.id: r for r in results}
    assert [r.status for r in results] == [Status.ERROR, Status.ERROR, Status.ERROR, Status.PASS]
    assert "JSONDecodeError" in got["sdk.1.json-crash"].detail
    assert "CancelledError" in got["sdk.1.cancel-crash"].detail
    for r in results:
        assert "\n" not in r.detail and len(r.detail) <= 300, r.detail
    assert got["sdk.1.after"].detail == "still ran"


def test_undeclared_extension_is_not_applicable() -> None:
    """A check needing an extension the program did not declare is n/a naming it; a declared one runs."""
    reg = Registry()

    @check("sdk.2.needs-fail", section="2", description="x", registry=reg, declares=["conformance:fail"])
    async def needs(ctx: object) -> str:
        return "ran"

    env = _env()
    env.declared = frozenset({"CONCURRENCY"})
    (result,) = asyncio.run(run_checks(list(reg), env))
    assert result.status is Status.NOT_APPLICABLE
    assert result.detail == "n/a (program does not declare conformance:fail)"
    env.declared = frozenset({"conformance:fail"})
    (result,) = asyncio.run(run_checks(list(reg), env))
    assert result.status is Status.PASS


def test_declaration_line_parsing() -> None:
    """The declaration line is found behind a log prefix; commas, spaces and `none` are understood."""
    from conveyor_conformance.declare import parse_declaration, parse_names

    out = "starting\n2026-01-01 INFO conveyor-conformance: supports CONCURRENCY, conformance:fail\nok\n"
    assert parse_declaration(out) == frozenset({"CONCURRENCY", "conformance:fail"})
    assert parse_declaration("no declaration here\n") is None
    assert parse_names("none") == frozenset()
    assert parse_names("A,B C") == frozenset({"A", "B", "C"})


_SILENT_PROGRAM = """
import asyncio, os
from conveyor_sdk._transport import TransportOptions, open_session
async def main():
    stream = await open_session(os.environ["CONVEYOR_ADDR"], TransportOptions())
    await asyncio.sleep(60)
asyncio.run(main())
"""


def test_probe_reads_the_declaration_or_finds_none() -> None:
    """Probing our worker program yields its declaration; one that connects without it declares nothing."""
    import sys

    from conveyor_conformance.declare import EXTENSIONS, probe_declarations

    ours, how = asyncio.run(
        probe_declarations([sys.executable, "-m", "conveyor_conformance.worker_program"], {})
    )
    assert ours == frozenset(EXTENSIONS) and "declaration line" in how
    silent, how = asyncio.run(probe_declarations([sys.executable, "-c", _SILENT_PROGRAM], {}))
    assert silent == frozenset() and "no declaration" in how
