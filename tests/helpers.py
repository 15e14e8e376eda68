"""Small helpers shared by integration tests."""

from __future__ import annotations

from cellblock.errors import CellblockError
from cellblock.images.store import require_rootfs
from tests.conftest import require


def require_default_image() -> None:
    try:
        require_rootfs()
    except CellblockError:
        require(False, "the default image is not built: run `cellblock image build`")
