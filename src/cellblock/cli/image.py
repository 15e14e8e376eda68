"""``cellblock image build|list``: the sandbox root filesystems."""

from __future__ import annotations

from typing import Any

import click
from rich.console import Console
from rich.table import Table

from cellblock.cli._common import friendly_errors
from cellblock.errors import CellblockError
from cellblock.images.store import DEFAULT_IMAGE, ImageInfo, docker_tag, image_dir, list_images

__all__ = ["image"]


def _human(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"  # pragma: no cover - unreachable


def _image_group() -> None:
    """Build and list sandbox root filesystems."""


# Built explicitly rather than decorated, so that the command object has a declared type.
image: click.Group = click.group(name="image")(_image_group)


@image.command()
@click.option("--name", default=DEFAULT_IMAGE, show_default=True, help="Image name.")
@click.option("--suite", default="bookworm", show_default=True, help="Debian release.")
@click.option("--package", "packages", multiple=True,
              help="Extra Debian package to install (repeatable).")
@click.option("--mirror", default=None, help="Debian mirror URL (default: debootstrap's).")
@click.option("--docker", "docker", is_flag=True,
              help="Also import the tree as the local Docker image for the docker backends.")
@click.option("--force", is_flag=True, help="Rebuild even if the image is up to date.")
@click.option("--quiet", "-q", is_flag=True, help="No progress display (for CI logs).")
@friendly_errors
def build(*, name: str, suite: str, packages: tuple[str, ...], mirror: str | None, docker: bool,
           force: bool, quiet: bool) -> None:
    """Build a Debian root filesystem with debootstrap (needs root; about a minute)."""
    from cellblock.images.build import (
        BuildRequest,
        RichProgress,
        SilentProgress,
    )
    from cellblock.images.build import build as do_build

    request = BuildRequest(name=name, suite=suite, packages=packages, mirror=mirror,
                           docker=docker, force=force)
    if quiet:
        info, built = do_build(request, SilentProgress())
    else:
        with RichProgress() as bar:
            info, built = do_build(request, bar)
    verb = "built" if built else "is up to date"
    click.echo(f"image {info.name} {verb}: {info.digest[:19]} "
               f"({_human(info.size_bytes)}, {len(info.packages)} packages) "
               f"at {image_dir(info.name) / 'rootfs'}")
    if docker:
        click.echo(f"docker image: {docker_tag(info.name)}")


def _docker_state(images: list[ImageInfo]) -> dict[str, str]:
    """'yes'/'no' per image name, or why it could not be asked."""
    from cellblock.images.build import docker_client, docker_image_present

    try:
        client: Any = docker_client(timeout=5)
    except CellblockError:
        return {info.name: "daemon unreachable" for info in images}
    state: dict[str, str] = {}
    for info in images:
        try:
            state[info.name] = "yes" if docker_image_present(info, client) else "no"
        except Exception as exc:
            state[info.name] = f"error: {type(exc).__name__}"
    return state


@image.command("list")
@friendly_errors
def list_() -> None:
    """List built images and whether their Docker mirror image exists."""
    images = list_images()
    console = Console()
    if not images:
        console.print("no images built yet; run: cellblock image build")
        return
    docker_state = _docker_state(images)
    table = Table(title="cellblock images")
    for col in ("name", "digest", "size", "packages", "built at", "docker"):
        table.add_column(col)
    for info in images:
        table.add_row(info.name, info.digest.removeprefix("sha256:")[:12],
                      _human(info.size_bytes),
                      str(len(info.packages)), info.built_at, docker_state[info.name])
    console.print(table)
