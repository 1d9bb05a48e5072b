"""Markers for tests of the HTTP/2 kernel's fast path itself (see tests/test_h2_kernel_paths.py)."""

from __future__ import annotations

import pytest

from conveyor_sdk._h2kernel import probe

# A test that compares the fast path with h2 (or counts that it was taken) means nothing where the
# public path is forced: tests/test_h2_kernel_paths.py deselects it there (-m "not h2_fast"), and a
# developer running with CONVEYOR_H2_PUBLIC=1 sees it skipped with this reason.
FAST_ONLY = [
    pytest.mark.h2_fast,
    pytest.mark.skipif(not probe.fast, reason=f"tests the HTTP/2 kernel's fast path ({probe.reason})"),
]
