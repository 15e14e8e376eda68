"""`make demo` runs demo/tutorial_checks.py: it must pass on every backend."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conformance.test_conformance import backend_available
from tests.conftest import require
from tests.helpers import require_default_image

DEMO = Path(__file__).resolve().parents[1] / "demo" / "tutorial_checks.py"


@pytest.mark.integration
@pytest.mark.parametrize("backend", ["bwrap", "docker", "gvisor"])
def test_demo_passes(backend: str) -> None:
    require_default_image()
    ok, why = backend_available(backend)
    require(ok, f"backend {backend} unavailable: {why}")
    proc = subprocess.run(
        [sys.executable, str(DEMO), "--backend", backend],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "all checks passed" in proc.stdout
    assert proc.stdout.count("PASS") == 5
