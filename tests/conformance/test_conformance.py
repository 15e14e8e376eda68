"""The shipped conformance suite, run against every backend. Never skipped in CI."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cellblock.conformance.checks import CHECKS, Check, Harness
from tests.conftest import require
from tests.helpers import require_default_image

BACKENDS = ["bwrap", "docker", "gvisor"]


def backend_available(name: str) -> tuple[bool, str]:
    from cellblock import Sandbox
    from cellblock.errors import CellblockError

    try:
        Sandbox(name).close()
    except CellblockError as exc:
        return False, f"{name}: {exc.operator_message()}"
    except ImportError as exc:
        return False, f"{name}: {exc}"
    return True, ""


_harnesses: dict[str, Harness] = {}


@pytest.fixture(scope="module")
def harnesses() -> Iterator[dict[str, Harness]]:
    yield _harnesses
    for h in _harnesses.values():
        h.close()
    _harnesses.clear()


@pytest.mark.integration
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("check", CHECKS, ids=[c.name for c in CHECKS])
def test_conformance(backend: str, check: Check, harnesses: dict[str, Harness]) -> None:
    require_default_image()
    if backend not in harnesses:
        ok, why = backend_available(backend)
        require(ok, f"backend {backend} unavailable: {why}")
        harnesses[backend] = Harness(backend)
    check.func(harnesses[backend])
