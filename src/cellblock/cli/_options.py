"""Build a backend's typed options from CLI flags."""

from __future__ import annotations

from cellblock.backends import get_backend_class
from cellblock.backends.base import BackendOptions


def backend_options(backend: str, image: str | None, *, pool: bool = False) -> BackendOptions | None:
    """Options for ``backend`` from CLI flags, or None for the backend's defaults.

    One-shot commands (``cellblock run``) pass ``pool=False``: a pool of pre-spawned
    sandboxes only pays off across many calls, and would be spawned just to be destroyed.
    """
    cls = get_backend_class(backend)
    fields = cls.options_type.model_fields
    values: dict[str, object] = {}
    if image is not None:
        if "image" not in fields:
            raise ValueError(f"backend {backend!r} takes no image option")
        values["image"] = image
    if not pool and "pool_size" in fields:
        values["pool_size"] = 0
    return cls.options_type.model_validate(values) if values else None
