"""Where images live and how a backend finds one.

Layout under :func:`cellblock_home`::

    images/<name>/rootfs/          the root filesystem (read-only to every sandbox)
    images/<name>/manifest.json    packages, versions, digest, build parameters

``cellblock_home`` is ``$CELLBLOCK_HOME`` if set, else ``/var/lib/cellblock`` for root
and ``$XDG_CACHE_HOME/cellblock`` (``~/.cache/cellblock``) for everyone else. Root's
home is mode 0700, and sandboxes run under an unprivileged host uid that must be able
to read the root filesystem, hence the system path for root.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from cellblock.errors import ImageNotFound, PolicyError

__all__ = [
    "DEFAULT_IMAGE",
    "ImageInfo",
    "cellblock_home",
    "docker_tag",
    "image_dir",
    "list_images",
    "require_rootfs",
    "validate_image_name",
]

DEFAULT_IMAGE = "default"
_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")


class ImageInfo(BaseModel):
    """The manifest written next to a built root filesystem."""

    model_config = ConfigDict(extra="ignore")

    name: str
    suite: str = "bookworm"
    packages: dict[str, str] = {}
    """Installed Debian packages and their versions."""
    extra_packages: list[str] = []
    digest: str = ""
    """sha256 over the tree's paths, modes and contents: equal digests, equal trees."""
    built_at: str = ""
    size_bytes: int = 0


def cellblock_home() -> Path:
    """Root of cellblock's on-disk state (images, local run log)."""
    env = os.environ.get("CELLBLOCK_HOME")
    if env:
        return Path(env)
    if os.geteuid() == 0:
        return Path("/var/lib/cellblock")
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "cellblock"


def validate_image_name(name: str) -> str:
    if not _NAME.match(name):
        raise PolicyError(
            f"invalid image name {name!r}: lowercase letters, digits, '.', '_', '-' (max 64)"
        )
    return name


def image_dir(name: str = DEFAULT_IMAGE) -> Path:
    return cellblock_home() / "images" / validate_image_name(name)


def docker_tag(name: str = DEFAULT_IMAGE) -> str:
    """The local Docker image that mirrors root filesystem ``name``."""
    return f"cellblock/{validate_image_name(name)}:latest"


def require_rootfs(name: str = DEFAULT_IMAGE) -> Path:
    """Path of a built root filesystem, or :class:`ImageNotFound` with the build command."""
    rootfs = image_dir(name) / "rootfs"
    if not (rootfs / "usr" / "bin").is_dir() or not (image_dir(name) / "manifest.json").is_file():
        build = "cellblock image build" + ("" if name == DEFAULT_IMAGE else f" --name {name}")
        raise ImageNotFound(name, hint=f"run: {build}", detail=f"missing {rootfs}")
    return rootfs


def list_images() -> list[ImageInfo]:
    root = cellblock_home() / "images"
    found: list[ImageInfo] = []
    if not root.is_dir():
        return found
    for manifest in sorted(root.glob("*/manifest.json")):
        try:
            found.append(ImageInfo.model_validate(json.loads(manifest.read_text())))
        except (OSError, ValueError):
            continue
    return found
