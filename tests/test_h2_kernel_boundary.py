"""Only the HTTP/2 kernel (conveyor_sdk/_h2kernel) names private parts of h2, hpack, hyperframe or asyncio.

The private names are read from the installed libraries themselves (every ``_name`` they define:
functions, methods, class attributes, ``self._name`` attributes, module globals; for asyncio the
module-level ones), so a name the next h2 release adds is covered too. A module outside the kernel
fails when it imports a private name or module of those libraries, or names one as an attribute
(``conn._data_to_send``, ``getattr(conn, "_data_to_send")``) that it does not define itself.
"""

from __future__ import annotations

import ast
import asyncio
import functools
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
KERNEL = ROOT / "conveyor_sdk" / "_h2kernel"
LIBRARIES = ("h2", "hpack", "hyperframe")
SCANNED = [
    *sorted(ROOT.glob("conveyor*/**/*.py")),
    *sorted((ROOT / "bench").glob("**/*.py")),
    *sorted((ROOT / "examples").glob("**/*.py")),
]
SCANNED = [p for p in SCANNED if KERNEL not in p.parents and "_gen" not in p.parts]
# Tests compare the kernel's fast path with h2 itself, and the fault test breaks an internal on
# purpose: they may look inside h2. Every other test module is held to the same rule.
TEST_EXEMPT = {
    "test_h2fast.py",
    "test_fast_data.py",
    "test_request_fast_path.py",
    "test_response_fast_path.py",
}
SCANNED += [p for p in sorted((ROOT / "tests").glob("**/*.py")) if p.name not in TEST_EXEMPT]


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.submodule_search_locations, name
    return Path(next(iter(spec.submodule_search_locations)))


def _defined(tree: ast.AST, *, attributes: bool) -> set[str]:
    """Private names ``tree`` defines: defs, classes, assignments, and (``attributes``) ``x._name = ...``."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif attributes and isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.alias):
            names.add(node.asname or node.name.split(".")[0])
        elif isinstance(node, ast.arg):
            names.add(node.arg)
    return {n for n in names if _private(n)}


@functools.cache
def library_private_names() -> frozenset[str]:
    """Every private name h2, hpack and hyperframe define (anywhere: on any object)."""
    names: set[str] = set()
    for lib in LIBRARIES:
        for path in _package_dir(lib).glob("**/*.py"):
            names |= _defined(ast.parse(path.read_text(encoding="utf-8")), attributes=True)
    return frozenset(names)


@functools.cache
def asyncio_private_names() -> frozenset[str]:
    """asyncio's private module-level names (``tasks._enter_task``), named through an asyncio module."""
    names: set[str] = set()
    for path in Path(asyncio.__file__).parent.glob("*.py"):
        for stmt in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(stmt, ast.FunctionDef | ast.ClassDef) and _private(stmt.name):
                names.add(stmt.name)
            elif isinstance(stmt, ast.Assign | ast.AnnAssign):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                names |= {t.id for t in targets if isinstance(t, ast.Name) and _private(t.id)}
    return frozenset(names)


def _aliases(tree: ast.AST, roots: tuple[str, ...]) -> set[str]:
    """Names bound by imports from ``roots`` (``import asyncio``, ``from asyncio import tasks``)."""
    aliases: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            aliases |= {a.asname or a.name.split(".")[0] for a in node.names if a.name.split(".")[0] in roots}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in roots:
            aliases |= {a.asname or a.name for a in node.names}
    return aliases


def _overridden_hooks(tree: ast.AST) -> list[str]:
    """Private h2/hpack/hyperframe names a subclass of one of their classes defines (a private hook)."""
    libs, private = _aliases(tree, LIBRARIES), library_private_names()
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and any(_root_name(base) in libs for base in node.bases):
            own = _defined(ast.Module(node.body, []), attributes=False)
            found += [f"{node.lineno}: {node.name} overrides {name}" for name in sorted(own & private)]
    return found


def _root_name(node: ast.expr) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _watched_module(module: str) -> bool:
    return module.split(".", maxsplit=1)[0] in (*LIBRARIES, "asyncio")


def violations(source: str, filename: str = "<source>") -> list[str]:
    """Private names of the watched libraries that ``source`` names (``line: what``)."""
    tree = ast.parse(source, filename)
    private = library_private_names() - _defined(tree, attributes=True)
    in_asyncio, aliases = asyncio_private_names(), _aliases(tree, ("asyncio",))
    found: list[str] = _overridden_hooks(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [
                f"{node.lineno}: import {a.name}"
                for a in node.names
                if _watched_module(a.name) and any(_private(part) for part in a.name.split("."))
            ]
        elif isinstance(node, ast.ImportFrom) and node.module and _watched_module(node.module):
            if any(_private(part) for part in node.module.split(".")):
                found.append(f"{node.lineno}: from {node.module} import ...")
            found += [
                f"{node.lineno}: from {node.module} import {a.name}" for a in node.names if _private(a.name)
            ]
        elif isinstance(node, ast.Attribute) and node.attr in private:
            found.append(f"{node.lineno}: .{node.attr}")
        elif (
            isinstance(node, ast.Attribute) and node.attr in in_asyncio and _root_name(node.value) in aliases
        ):
            found.append(f"{node.lineno}: asyncio's .{node.attr}")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr", "setattr", "delattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and (
                node.args[1].value in private
                or (node.args[1].value in in_asyncio and _root_name(node.args[0]) in aliases)
            )
        ):
            found.append(f"{node.lineno}: {node.func.id}(..., {node.args[1].value!r})")
    return found


def _named(
    target: ast.expr, name: object, private: frozenset[str], asyncio_: tuple[frozenset[str], set[str]]
) -> bool:
    in_asyncio, aliases = asyncio_
    return name in private or (name in in_asyncio and _root_name(target) in aliases)


def test_the_library_private_names_are_found() -> None:
    """The names the kernel exists for are in the set the scan looks for."""
    names = library_private_names() | asyncio_private_names()
    for name in (
        "_data_to_send",
        "_open_streams",
        "_prepare_for_sending",
        "_terminate_connection",
        "_receive_goaway_frame",
        "_inbound_flow_control_window_manager",
        "_transitions",
        "_headers_buffer",
        "_enter_task",
        "_leave_task",
    ):
        assert name in names


@pytest.mark.parametrize(
    "source",
    [
        "def f(conn):\n    return conn._data_to_send\n",
        "def f(conn):\n    return getattr(conn, '_data_to_send', b'')\n",
        "from h2.stream import _transitions\n",
        "from asyncio import tasks\ntasks._enter_task(None, None)\n",
        "import asyncio\nf = getattr(asyncio.tasks, '_leave_task', None)\n",
        "from asyncio.tasks import _leave_task\n",
        "import h2.connection\nh2.connection.H2Connection()._open_streams(0)\n",
        "import h2.connection\n\nclass C(h2.connection.H2Connection):\n    _receive_goaway_frame = None\n",
    ],
    ids=[
        "attribute",
        "getattr",
        "from-import",
        "asyncio-attribute",
        "asyncio-getattr",
        "asyncio-import",
        "method",
        "hook",
    ],
)
def test_the_scan_catches_a_private_name(source: str) -> None:
    assert violations(source)


def test_the_scan_leaves_a_modules_own_private_names_alone() -> None:
    own = "class A:\n    def __init__(self):\n        self._data = 1\n\n    def f(self):\n"
    own += "        return self._data\n"
    public_override = (
        "import h2.connection\n\nclass C(h2.connection.H2Connection):\n    receive_data = None\n"
    )
    assert violations(own) == []
    assert violations(public_override) == []


@pytest.mark.parametrize("path", SCANNED, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_outside_the_kernel_names_a_private_of_h2_hpack_hyperframe_or_asyncio(path: Path) -> None:
    assert violations(path.read_text(encoding="utf-8"), str(path)) == []
