"""The bubblewrap backend (namespaces, seccomp, cgroups; no daemon)."""

from cellblock.backends.bwrap.backend import BwrapBackend, BwrapOptions

__all__ = ["BwrapBackend", "BwrapOptions"]
