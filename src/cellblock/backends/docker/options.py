"""Typed options of the Docker and gVisor backends."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import Field, field_validator

from cellblock.backends.base import BackendOptions
from cellblock.images.store import DEFAULT_IMAGE, docker_tag, validate_image_name

__all__ = ["DockerOptions"]

# A Docker image reference: [registry/]name[:tag][@digest]. Deliberately strict: the value
# ends up in API calls and error messages.
_REFERENCE = re.compile(
    r"^[a-z0-9][a-z0-9._/-]{0,199}(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[0-9a-f]{64})?$"
)


class DockerOptions(BackendOptions):
    """Options of ``backend="docker"`` and ``backend="gvisor"``.

    Example::

        Sandbox("docker", options=DockerOptions(image="python:3.12-slim", pool_size=4))
    """

    image: str = DEFAULT_IMAGE
    """A cellblock image name (``"default"`` is ``cellblock/default:latest``, imported by
    ``cellblock image build --docker``), or any Docker image reference that is present
    locally (``"python:3.12-slim"``). Nothing is ever pulled."""
    pool_size: Annotated[int, Field(ge=0, le=64)] = 2
    """Containers kept created-but-never-started per policy, so a call only has to start
    one. ``0`` disables the pool (every call creates its container)."""
    pool_started: bool = True
    """Also start pool containers ahead of time, like the bwrap backend's pool: the
    bootstrap then waits, as root with no code yet, for the code on stdin, and the call's
    clock starts when the code is sent. This takes the sandbox boot (about 0.1 s for
    runc, 0.25 s for gVisor) off the call, at the cost of a running sandbox per pooled
    container, and lets a program see (from the start time of PID 1) how long its
    sandbox waited in the pool. ``False``: pool containers are created and never
    started; a call then starts its container (slower, no such clue)."""
    pool_max_age_s: Annotated[float, Field(gt=0, le=86400)] = 300
    """Pool containers older than this are removed and replaced (an image rebuilt since
    they were created is then picked up)."""
    cpus: Annotated[float, Field(gt=0, le=256)] = 1.0
    """CPU quota of each sandbox, in cores."""
    api_timeout_s: Annotated[float, Field(gt=0, le=600)] = 30
    """Timeout of each Docker Engine API request (not of the sandboxed program)."""
    docker_host: str | None = None
    """Engine address (``unix:///var/run/docker.sock``); ``None`` follows ``DOCKER_HOST``."""

    @field_validator("image")
    @classmethod
    def _check_image(cls, value: str) -> str:
        if ":" in value or "/" in value or "@" in value:
            if not _REFERENCE.match(value):
                raise ValueError(f"invalid Docker image reference {value!r}")
            return value
        validate_image_name(value)
        return value

    @property
    def image_reference(self) -> str:
        """The Docker reference actually run: cellblock names map to ``cellblock/NAME:latest``."""
        if ":" in self.image or "/" in self.image or "@" in self.image:
            return self.image
        return docker_tag(self.image)

    @property
    def is_cellblock_image(self) -> bool:
        return self.image_reference != self.image
