"""cellblock: run code written by AI agents in sandboxes they cannot escape, persist in,
or use to talk to one another.

Quick start::

    from cellblock import Sandbox, Policy

    with Sandbox("bwrap", Policy(timeout_s=5)) as sb:
        result = sb.run("print(1 + 1)")
        print(result.stdout, result.exit_code)
"""

from cellblock.backends import available_backends, register_backend
from cellblock.backends.base import Backend, BackendOptions
from cellblock.errors import (
    BackendNotFound,
    CellblockError,
    ImageNotFound,
    PolicyError,
    ProtectionUnavailable,
    SandboxUnavailable,
)
from cellblock.logs.record import RunRecord
from cellblock.policy import NetworkPolicy, Policy
from cellblock.result import ExecResult
from cellblock.sandbox import Sandbox

__version__ = "0.1.0"

__all__ = [
    "Backend",
    "BackendNotFound",
    "BackendOptions",
    "CellblockError",
    "ExecResult",
    "ImageNotFound",
    "NetworkPolicy",
    "Policy",
    "PolicyError",
    "ProtectionUnavailable",
    "RunRecord",
    "Sandbox",
    "SandboxUnavailable",
    "__version__",
    "available_backends",
    "register_backend",
]
