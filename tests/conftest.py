"""Shared test helpers.

Integration tests need real infrastructure (bwrap, a built image, dockerd, runsc,
PostgreSQL). Locally a missing piece skips the test with the command that provides it;
in CI (CI=true) it fails the test instead, because CI must run everything.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

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


@pytest.fixture(scope="session", autouse=True)
def _private_cellblock_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Give the test session its own CELLBLOCK_HOME (run log, spool) sharing the built
    images, so tests never write into the machine's real run log."""
    from cellblock.images.store import cellblock_home

    real_images = cellblock_home() / "images"
    home = tmp_path_factory.mktemp("cellblock-home")
    (home / "images").symlink_to(real_images, target_is_directory=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CELLBLOCK_HOME", str(home))
        yield home
