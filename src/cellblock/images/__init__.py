"""Sandbox root filesystems: built once with debootstrap, shared by every backend."""

from cellblock.images.store import (
    DEFAULT_IMAGE,
    ImageInfo,
    cellblock_home,
    docker_tag,
    image_dir,
    list_images,
    require_rootfs,
)

__all__ = [
    "DEFAULT_IMAGE",
    "ImageInfo",
    "cellblock_home",
    "docker_tag",
    "image_dir",
    "list_images",
    "require_rootfs",
]
