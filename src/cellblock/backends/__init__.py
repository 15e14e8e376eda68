"""Isolation backends and the registry that finds them by name.

Built-in backends are imported lazily, so ``import cellblock`` never pulls in the Docker
SDK. Third-party backends register through the ``cellblock.backends`` entry-point group
(``name = "package.module:BackendClass"``).
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

from cellblock.backends.base import (
    Backend,
    BackendOptions,
    CancelToken,
    ExecRequest,
    HostCheck,
    RawOutcome,
)
from cellblock.errors import BackendNotFound

__all__ = [
    "Backend",
    "BackendOptions",
    "CancelToken",
    "ExecRequest",
    "HostCheck",
    "RawOutcome",
    "available_backends",
    "get_backend_class",
    "register_backend",
]

# name -> "module:Class"; imported on first use.
_BUILTIN: dict[str, str] = {
    "bwrap": "cellblock.backends.bwrap:BwrapBackend",
    "docker": "cellblock.backends.docker:DockerBackend",
    "gvisor": "cellblock.backends.docker:GVisorBackend",
}
_INSTALL_HINTS: dict[str, str] = {
    "kubernetes": "a Kubernetes backend is not part of this release",
}
_registered: dict[str, type[Backend]] = {}


def register_backend(cls: type[Backend]) -> type[Backend]:
    """Class decorator: make ``cls`` available as ``Sandbox(backend=cls.name)``."""
    _registered[cls.name] = cls
    return cls


def available_backends() -> list[str]:
    """Names of every known backend (built-in, registered, and from entry points)."""
    names = set(_BUILTIN) | set(_registered)
    names.update(ep.name for ep in entry_points(group="cellblock.backends"))
    return sorted(names)


def get_backend_class(name: str) -> type[Backend]:
    """Resolve a backend name to its class, importing it on first use."""
    if name in _registered:
        return _registered[name]
    target = _BUILTIN.get(name)
    if target is None:
        for ep in entry_points(group="cellblock.backends"):
            if ep.name == name:
                cls = ep.load()
                if not (isinstance(cls, type) and issubclass(cls, Backend)):
                    raise BackendNotFound(name, available_backends())
                _registered[name] = cls
                return cls
        raise BackendNotFound(name, available_backends(), hint=_INSTALL_HINTS.get(name))
    module_name, _, attr = target.partition(":")
    cls = getattr(importlib.import_module(module_name), attr)
    _registered[name] = cls
    return cls  # type: ignore[no-any-return]
