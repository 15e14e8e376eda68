"""Build a backend's typed options from CLI flags."""

from __future__ import annotations

from cellblock.backends import get_backend_class
from cellblock.backends.base import BackendOptions


def backend_options(backend: str, image: str | None) -> BackendOptions | None:
    """Options for ``backend`` with the image overridden, or None for the defaults."""
    if image is None:
        return None
    cls = get_backend_class(backend)
    return cls.options_type.model_validate({"image": image})
