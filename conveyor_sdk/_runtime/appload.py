"""Find the App/Registry named by ``MODULE:ATTR`` (or ``MODULE`` with exactly one).

Used by the supervisor (``conveyor worker``) and by every child process, so both
resolve the same object the same way. The current directory is put first on
``sys.path`` (as uvicorn does) so ``conveyor worker myapp:app`` works from a
project folder without installing it.

Errors are :class:`AppLoadError` with an ``exit_code`` the CLI uses verbatim:
:data:`EXIT_IMPORT` when the module cannot be imported (or raises while
importing), :data:`EXIT_ATTRIBUTE` when the attribute is missing or is not a
Registry.
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback

from conveyor_sdk._worker.registry import Registry

__all__ = ["EXIT_ATTRIBUTE", "EXIT_IMPORT", "AppLoadError", "load_app", "split_spec", "user_traceback"]

EXIT_IMPORT = 3
EXIT_ATTRIBUTE = 4


class AppLoadError(Exception):
    """The app could not be loaded; ``exit_code`` says why (3 import, 4 attribute)."""

    def __init__(self, message: str, exit_code: int, detail: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code
        self.detail = detail  # the traceback of an import failure, for logs


_SDK_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # .../conveyor_sdk
_IMPORTLIB = os.path.dirname(os.path.abspath(importlib.__file__))


def _user_frame(filename: str) -> bool:
    """False for frames of the import machinery and of conveyor_sdk itself."""
    if filename.startswith("<frozen importlib"):
        return False
    path = os.path.abspath(filename)
    return not (path.startswith(_SDK_DIR + os.sep) or path.startswith(_IMPORTLIB + os.sep))


def _trim(te: traceback.TracebackException, seen: set[int]) -> None:
    if id(te) in seen:
        return
    seen.add(id(te))
    te.stack = traceback.StackSummary.from_list([f for f in te.stack if _user_frame(f.filename)])
    for chained in (te.__cause__, te.__context__):
        if chained is not None:
            _trim(chained, seen)


def user_traceback(exc: BaseException) -> str:
    """The traceback of ``exc`` without import-machinery and SDK frames (chained causes kept)."""
    te = traceback.TracebackException.from_exception(exc)
    _trim(te, set())
    return "".join(te.format())


def split_spec(spec: str) -> tuple[str, str | None]:
    """``"pkg.mod:app"`` -> ``("pkg.mod", "app")``; ``"pkg.mod"`` -> ``("pkg.mod", None)``."""
    module, sep, attr = spec.partition(":")
    module = module.strip()
    if not module or (sep and not attr.strip()):
        raise AppLoadError(f"invalid app {spec!r}: expected MODULE:ATTR, e.g. examples.hello:app", 4)
    return module, (attr.strip() if sep else None)


def _ensure_cwd_on_path() -> None:
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)


def _import(module_name: str) -> object:
    try:
        return importlib.import_module(module_name)
    except KeyboardInterrupt:
        raise
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing and (module_name == missing or module_name.startswith(missing + ".")):
            message = f"cannot import app module {module_name!r}: no module named {missing!r}"
            raise AppLoadError(message, EXIT_IMPORT) from None  # a typo in the spec: no traceback
        message = f"importing app module {module_name!r} failed: ModuleNotFoundError: {exc}"
        raise AppLoadError(message, EXIT_IMPORT, user_traceback(exc)) from None
    except BaseException as exc:  # isolation point: any import-time failure becomes exit 3
        raise AppLoadError(
            f"importing app module {module_name!r} failed: {type(exc).__name__}: {exc}",
            EXIT_IMPORT,
            user_traceback(exc),
        ) from None


def _single_registry(module: object, module_name: str) -> Registry:
    found = {id(v): (k, v) for k, v in vars(module).items() if isinstance(v, Registry)}
    if len(found) == 1:
        return next(iter(found.values()))[1]
    if not found:
        raise AppLoadError(f"module {module_name!r} defines no App or Registry", EXIT_ATTRIBUTE)
    names = ", ".join(sorted(k for k, _ in found.values()))
    raise AppLoadError(
        f"module {module_name!r} defines several apps ({names}); name one as {module_name}:NAME",
        EXIT_ATTRIBUTE,
    )


def load_app(spec: str) -> Registry:
    """Import ``spec`` and return its App/Registry. Raises :class:`AppLoadError`."""
    module_name, attr = split_spec(spec)
    _ensure_cwd_on_path()
    module = _import(module_name)
    if attr is None:
        return _single_registry(module, module_name)
    value: object = module
    for part in attr.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise AppLoadError(f"module {module_name!r} has no attribute {attr!r}", EXIT_ATTRIBUTE) from None
    if callable(value) and not isinstance(value, Registry):
        try:
            value = value()  # an app factory, as with uvicorn --factory
        except Exception as exc:
            raise AppLoadError(
                f"app factory {spec!r} failed: {type(exc).__name__}: {exc}",
                EXIT_IMPORT,
                user_traceback(exc),
            ) from None
    if not isinstance(value, Registry):
        raise AppLoadError(f"{spec!r} is a {type(value).__name__}, not an App or Registry", EXIT_ATTRIBUTE)
    return value
