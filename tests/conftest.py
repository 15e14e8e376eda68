"""Shared test helpers.

Integration tests need real infrastructure (bwrap, a built image, dockerd, runsc,
PostgreSQL). Locally a missing piece skips the test with the command that provides it;
in CI (CI=true) it fails the test instead, because CI must run everything.
"""

from __future__ import annotations

import os

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def require(condition: bool, reason: str) -> None:
    """Skip locally, fail in CI, when ``condition`` does not hold."""
    if condition:
        return
    if in_ci():
        pytest.fail(f"required in CI: {reason}")
    pytest.skip(reason)
