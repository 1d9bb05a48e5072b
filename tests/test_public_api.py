"""The top-level conveyor_sdk names resolve lazily and match __all__."""

from __future__ import annotations

import subprocess
import sys

import pytest

import conveyor_sdk


def test_every_exported_name_resolves() -> None:
    """Each name in __all__ is an attribute of the package."""
    for name in conveyor_sdk.__all__:
        assert getattr(conveyor_sdk, name) is not None, name
    with pytest.raises(AttributeError):
        _ = conveyor_sdk.NoSuchThing  # type: ignore[attr-defined]


def test_importing_the_package_does_not_load_the_client_stack() -> None:
    """`import conveyor_sdk` stays cheap: the client, connectrpc and pyqwest load only on use."""
    code = (
        "import sys, conveyor_sdk; "
        "print(sorted(m for m in ('conveyor_sdk.client', 'connectrpc', 'pyqwest') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
