"""Exceptions raised by cellblock.

A sandboxed program that fails is *not* an exception: a non-zero exit, a timeout or a
memory kill all come back as an :class:`~cellblock.ExecResult`.  Exceptions are reserved
for the cases where cellblock could not run the code at all, or was asked to do
something invalid.

Every exception carries ``safe_message``: text that may be shown to a model or to an
untrusted caller.  It never contains host paths, container IDs, daemon output or any
other host detail.  The full technical detail stays in ``detail`` (and in logs) for the
operator.  ``str(exc)`` returns the safe message, so an integration that blindly turns an
exception into tool output still leaks nothing.

The tree::

    CellblockError
    ├── PolicyError              invalid policy or request (caller's fault)
    ├── BackendNotFound          unknown backend name; says what to install
    ├── ImageNotFound            the sandbox root filesystem / image is missing
    └── SandboxUnavailable       infrastructure could not run the sandbox
        └── ProtectionUnavailable   a required protection cannot be applied (fail closed)
"""

from __future__ import annotations

__all__ = [
    "BackendNotFound",
    "CellblockError",
    "ImageNotFound",
    "PolicyError",
    "ProtectionUnavailable",
    "SandboxUnavailable",
]


class CellblockError(Exception):
    """Base class of every error cellblock raises on purpose.

    Attributes:
        safe_message: Text that is safe to show to a model or an untrusted caller.
        detail: Operator-only detail (may contain host paths or engine output). Never
            show this to a model.
        hint: An optional fix for the operator, e.g. the command that installs what
            is missing.
    """

    default_safe_message = "the sandbox could not run this request"

    def __init__(
        self,
        safe_message: str | None = None,
        *,
        detail: str | None = None,
        hint: str | None = None,
    ) -> None:
        self.safe_message = safe_message or self.default_safe_message
        self.detail = detail
        self.hint = hint
        super().__init__(self.safe_message)

    def __str__(self) -> str:
        return self.safe_message

    def operator_message(self) -> str:
        """The full message for a human operator (CLI, logs): safe text, detail, hint."""
        parts = [self.safe_message]
        if self.detail:
            parts.append(f"detail: {self.detail}")
        if self.hint:
            parts.append(f"fix: {self.hint}")
        return "\n".join(parts)


class PolicyError(CellblockError, ValueError):
    """The policy or the request is invalid (out of range, unknown language, ...)."""

    default_safe_message = "invalid sandbox policy or request"


class BackendNotFound(CellblockError, LookupError):
    """No backend is registered under the requested name."""

    default_safe_message = "unknown sandbox backend"

    def __init__(self, name: str, available: list[str], hint: str | None = None) -> None:
        self.name = name
        self.available = available
        msg = f"unknown sandbox backend {name!r}; available: {', '.join(available) or 'none'}"
        super().__init__(msg, hint=hint)


class ImageNotFound(CellblockError):
    """The root filesystem or container image the sandbox needs does not exist yet."""

    default_safe_message = "the sandbox image is not available"

    def __init__(self, image: str, *, hint: str | None = None, detail: str | None = None):
        self.image = image
        super().__init__(f"sandbox image {image!r} is not built", hint=hint, detail=detail)


class SandboxUnavailable(CellblockError):
    """The infrastructure could not run the sandbox (daemon down, spawn failure, ...).

    The message is generic on purpose. Engine errors carry host paths, container IDs
    and daemon internals; showing them to the model would hand it a map of the host and
    a side channel. The engine's text lives in ``detail`` for the operator only.
    """

    default_safe_message = "the sandbox is temporarily unavailable"


class ProtectionUnavailable(SandboxUnavailable):
    """A protection the policy requires cannot be applied on this host.

    cellblock fails closed: it refuses to run rather than run with weaker isolation,
    unless the policy explicitly opts out of that protection.
    """

    default_safe_message = "a required sandbox protection is unavailable on this host"

    def __init__(self, protection: str, *, detail: str | None = None, hint: str | None = None):
        self.protection = protection
        super().__init__(
            f"required protection {protection!r} is unavailable on this host",
            detail=detail,
            hint=hint,
        )
