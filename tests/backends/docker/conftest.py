"""Fixtures of the Docker/gVisor integration tests: a real daemon, and no leftovers.

Every test that touches the daemon asserts at the end that no cellblock container owned
by this test process remains (the docker-py integration tests' discipline).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from cellblock.backends.docker.gc import MANAGED_LABEL, OWNER_PID
from cellblock.images.store import docker_tag
from tests.conftest import require


def _client() -> Any:
    import docker

    try:
        client = docker.from_env(timeout=30).api
        client.ping()
    except Exception as exc:
        require(False, f"the Docker daemon is not reachable ({type(exc).__name__}); start dockerd")
        raise
    return client


@pytest.fixture(scope="session")
def docker_api() -> Iterator[Any]:
    client = _client()
    try:
        client.inspect_image(docker_tag())
    except Exception:
        require(False, f"{docker_tag()} is missing: run `cellblock image build --docker`")
    yield client
    client.close()


def own_containers(client: Any, pid: int | None = None) -> list[dict[str, Any]]:
    """cellblock containers owned by ``pid`` (default: this test process)."""
    owner = str(pid if pid is not None else os.getpid())
    return [
        c for c in client.containers(all=True, filters={"label": f"{MANAGED_LABEL}=1"})
        if (c.get("Labels") or {}).get(OWNER_PID) == owner
    ]


@pytest.fixture(params=["docker", "gvisor"])
def backend_name(request: pytest.FixtureRequest, docker_api: Any) -> str:
    name = str(request.param)
    if name == "gvisor":
        runtimes = docker_api.info().get("Runtimes") or {}
        require("runsc" in runtimes, "runsc is not registered with the Docker daemon")
    return name


@pytest.fixture(autouse=True)
def no_leftover_containers(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each integration test: nothing of ours is left, in any state."""
    yield
    if "docker_api" not in request.fixturenames:
        return
    client = request.getfixturevalue("docker_api")
    left = own_containers(client)
    for c in left:  # clean up so one failure does not cascade, then fail
        client.remove_container(c["Id"], force=True, v=True)
    assert not left, f"{len(left)} container(s) left behind: {[c['State'] for c in left]}"
