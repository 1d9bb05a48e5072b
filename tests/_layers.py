"""The layer map (CONTRIBUTING.md, "Layers") and the import scanners that check it.

Every one of our modules belongs to exactly one layer; a module may import its own layer and the
layers listed under ``MAY_IMPORT`` for it, nothing else. The static scan reads every import
statement in a file, at module level, under ``if TYPE_CHECKING:`` and inside functions, plus
``importlib.import_module("literal")``. The loaded-module checks (``tests/test_layers_loaded.py``)
then prove the same in a fresh interpreter, by what ``sys.modules`` holds after real use.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PACKAGES = {  # import name -> folder (setup.py renames cli/ and conformance/)
    "conveyor_sdk": ROOT / "conveyor_sdk",
    "conveyor_server_min": ROOT / "conveyor_server_min",
    "conveyor_cli": ROOT / "cli",
    "conveyor_conformance": ROOT / "conformance",
}

# Module prefix -> layer. The longest matching prefix wins, so ``conveyor_sdk`` alone (the package's
# lazy ``__init__``) is "top" while ``conveyor_sdk.errors`` is "protocol".
PLACES: dict[str, str] = {
    # protocol and shared value types: sans-I/O, usable by every layer
    "conveyor_sdk.errors": "protocol",
    "conveyor_sdk._protocol": "protocol",
    "conveyor_sdk._gen": "protocol",
    "conveyor_sdk.durations": "protocol",
    "conveyor_sdk._version": "protocol",
    "conveyor_sdk.codecs": "protocol",
    "conveyor_sdk._gojson": "protocol",
    "conveyor_sdk.types": "protocol",
    "conveyor_sdk._encryption": "protocol",
    "conveyor_sdk.encryption": "protocol",
    "conveyor_sdk._tracecontext": "protocol",
    # the HTTP/2 kernel and the session transport (an h2 kernel package of its own sits here too)
    "conveyor_sdk._transport": "transport",
    "conveyor_sdk._h2kernel": "transport",
    "conveyor_sdk._kernel": "transport",
    # the worker session driver, registry and executors
    "conveyor_sdk._worker": "worker",
    "conveyor_sdk.worker": "worker",
    "conveyor_sdk.tracing": "worker",
    # the producer and admin client, beside the worker
    "conveyor_sdk._client": "client",
    "conveyor_sdk.client": "client",
    "conveyor_sdk._app_validate": "client",
    # the multi-process runtime on top of the worker
    "conveyor_sdk._runtime": "runtime",
    "conveyor_sdk.metrics": "runtime",
    # the reference server: protocol + kernel + its own engine
    "conveyor_server_min": "server",
    # applications and glue: may import anything below
    "conveyor_sdk": "top",
    "conveyor_sdk.app": "top",
    "conveyor_sdk.testing": "top",
    "conveyor_cli": "top",
    "conveyor_conformance": "top",
}

MAY_IMPORT: dict[str, frozenset[str]] = {
    "protocol": frozenset({"protocol"}),
    "transport": frozenset({"protocol", "transport"}),
    "worker": frozenset({"protocol", "transport", "worker"}),
    "client": frozenset({"protocol", "transport", "client"}),
    "runtime": frozenset({"protocol", "transport", "worker", "runtime"}),
    "server": frozenset({"protocol", "transport", "server"}),
    "top": frozenset({"protocol", "transport", "worker", "client", "runtime", "server", "top"}),
}

# The server uses the kernel (h2 pieces, eager first steps, the event-loop choice), not the worker's
# session stream or its connection set-up, which belong to the client side of the transport.
SERVER_NEVER = frozenset(
    {
        "conveyor_sdk._transport.core",
        "conveyor_sdk._transport.session",
        "conveyor_sdk._transport.options",
        "conveyor_sdk._transport._connect",
    }
)

# Third-party libraries of the upper layers -> the layers that may import them: the CLI's and the
# dashboard's, so a worker child, a producer or a reference server process never pays for them. rich
# is also the runtime's: its live terminal view (``_runtime/live.py``, loaded by the supervisor only
# when stderr is a TTY) draws the supervisor's own state.
UPPER_LIBRARIES: dict[str, frozenset[str]] = {
    "typer": frozenset({"top"}),
    "click": frozenset({"top"}),
    "starlette": frozenset({"top"}),
    "jinja2": frozenset({"top"}),
    "uvicorn": frozenset({"top"}),
    "rich": frozenset({"runtime", "top"}),
}
# What the protocol layer never imports: it is sans-I/O (time is an argument).
IO_MODULES = frozenset(
    {"asyncio", "socket", "ssl", "selectors", "threading", "time", "subprocess", "multiprocessing"}
)
IO_LIBRARIES = frozenset({"h2", "hpack", "hyperframe", "pyqwest", "connectrpc", "grpc", "uvloop"})


def layer_of(module: str) -> str | None:
    """The layer of one of our modules (longest prefix in :data:`PLACES`), or None if unplaced."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        place = PLACES.get(".".join(parts[:n]))
        if place is not None and not (n == 1 and parts[0] == "conveyor_sdk" and len(parts) > 1):
            return place  # (``conveyor_sdk`` places only its ``__init__``: a new module needs a place)
    return None


GENERATED = "conveyor_sdk._gen"  # protobuf/Connect stubs: placed (protocol), never scanned


def python_files(folder: Path, *, generated: bool = False) -> list[Path]:
    """Our source files under ``folder``; generated protobuf code only when asked for."""
    return sorted(p for p in folder.rglob("*.py") if generated or "_gen" not in p.parts)


def module_files(packages: Mapping[str, Path] = PACKAGES) -> dict[str, Path]:
    """Dotted module name -> source file, for every module of ``packages`` (generated ones too, so an
    import of a stub resolves to the stub and not to the package's ``__init__``)."""
    mods: dict[str, Path] = {}
    for name, folder in packages.items():
        for path in python_files(folder, generated=True):
            parts = (name, *path.relative_to(folder).with_suffix("").parts)
            mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return mods


def imported_names(name: str, path: Path) -> set[str]:
    """Every dotted name ``name`` (at ``path``) imports, anywhere in the file, relative ones resolved.

    ``from pkg import x`` yields both ``pkg`` and ``pkg.x``; the caller keeps what is a module.
    """
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
        elif _is_import_module_call(node):
            found.add(node.args[0].value)  # type: ignore[attr-defined]
    return found


def _is_import_module_call(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call) or not node.args:
        return False
    func = node.func
    called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    first = node.args[0]
    return called == "import_module" and isinstance(first, ast.Constant) and isinstance(first.value, str)


def own_module(dotted: str, mods: Mapping[str, Path]) -> str | None:
    """The most specific of our modules that ``dotted`` names (``pkg.mod.Class`` -> ``pkg.mod``)."""
    parts = dotted.split(".")
    for n in range(len(parts), 0, -1):
        candidate = ".".join(parts[:n])
        if candidate in mods:
            return candidate
    return None


def module_edges(name: str, path: Path, mods: Mapping[str, Path]) -> set[str]:
    """Our modules that ``name`` imports (TYPE_CHECKING and function bodies included).

    ``from pkg import sub`` counts as importing ``pkg.sub`` only, not the package's ``__init__``.
    """
    names = imported_names(name, path)
    specific = {n for n in names if not any(other.startswith(n + ".") for other in names)}
    edges = {own_module(n, mods) for n in specific}
    return {m for m in edges if m is not None and m != name}


def layer_violations(mods: Mapping[str, Path]) -> list[str]:
    """One line per import that breaks the map, and per module the map does not place."""
    problems: list[str] = []
    for name, path in sorted(mods.items()):
        if _under(name, {GENERATED}):
            continue
        place = layer_of(name)
        if place is None:
            problems.append(f"{name}: not in the layer map (tests/_layers.py PLACES)")
            continue
        for dep in sorted(module_edges(name, path, mods)):
            dep_place = layer_of(dep)
            if dep_place is not None and dep_place not in MAY_IMPORT[place]:
                problems.append(f"{name} ({place}) imports {dep} ({dep_place})")
            elif place == "server" and _under(dep, SERVER_NEVER):
                problems.append(f"{name} (server) imports {dep} (worker side)")
        problems += _library_violations(name, place, path)
    return problems


def _library_violations(name: str, place: str, path: Path) -> list[str]:
    libraries = {n.split(".")[0] for n in imported_names(name, path)}
    forbidden = {lib for lib, places in UPPER_LIBRARIES.items() if place not in places}
    if place == "protocol":
        forbidden |= IO_MODULES | IO_LIBRARIES
    return [f"{name} ({place}) imports {lib}" for lib in sorted(libraries & forbidden)]


def _under(module: str, prefixes: Iterable[str]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


# What the protocol layer must not load even indirectly (a stdlib module may load threading or time
# for its own use, so the loaded-module check names the event loop, sockets and the HTTP/2 stack).
PROTOCOL_NEVER_LOADS = frozenset({"asyncio", "socket", "ssl", "selectors", *IO_LIBRARIES})


def loaded_violations(loaded: Iterable[str], place: str) -> list[str]:
    """The modules in ``loaded`` (a process's ``sys.modules``) that a process of layer ``place`` has no
    business loading (for the server, also the worker's session stream: :data:`SERVER_NEVER`).
    ``conveyor_sdk`` itself is exempt: Python loads a package before any of its
    modules, and its ``__init__`` loads the rest lazily (tests/test_public_api.py)."""
    libraries = {lib for lib, places in UPPER_LIBRARIES.items() if place not in places}
    if place == "protocol":
        libraries |= PROTOCOL_NEVER_LOADS
    problems = []
    for module in sorted(set(loaded)):
        if place == "server" and module in SERVER_NEVER:  # transport, but the worker's side of it
            problems.append(f"{module} (the worker's session stream)")
        elif module.split(".")[0] in PACKAGES and module != "conveyor_sdk":
            other = layer_of(module)
            if other is None or other not in MAY_IMPORT[place]:
                problems.append(f"{module} ({other})")
        elif module.split(".")[0] in libraries:
            problems.append(module)
    return problems
