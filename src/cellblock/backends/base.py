"""The backend interface: one small contract every isolation technology implements.

A backend turns one :class:`ExecRequest` into one :class:`RawOutcome`, in a sandbox that
exists only for that call. Everything above it (sanitising, run records, the async API,
integrations) is shared, so a new backend (Kubernetes, Firecracker...) is one class.

Contract every backend must honour (checked by :mod:`cellblock.conformance`):

* a fresh sandbox per call; nothing written survives the call;
* no network unless the policy allows it (and then only through the cellblock proxy);
* read-only everything except size-capped scratch;
* the wall-clock timeout, memory, pids and output limits kill the whole process tree;
* no process, container or mount is left behind, even when the call raises or is
  cancelled through ``cancel``;
* infrastructure failures raise :class:`~cellblock.errors.SandboxUnavailable` (or a
  subclass) with a safe message; a failing program is a normal outcome.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict

from cellblock.policy import Language, Policy
from cellblock.result import KilledReason, LimitsEnforcement

__all__ = [
    "Backend",
    "BackendOptions",
    "CancelToken",
    "ExecRequest",
    "HostCheck",
    "RawOutcome",
]

CODE_DIR = "/work"
"""The sandbox's working directory: a size-capped tmpfs with the code and input files
mounted read-only inside it. Neutral on purpose: tracebacks show ``/work/main.py``."""

CODE_FILENAMES: Mapping[Language, str] = {"python": "main.py", "bash": "main.sh"}

SANDBOX_ENV: Mapping[str, str] = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": CODE_DIR,
    "LANG": "C.UTF-8",
    "TMPDIR": "/tmp",
    # Unbuffered so that output written before a timeout kill reaches the caller.
    "PYTHONUNBUFFERED": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
}
"""The fixed base environment of every sandboxed program, on every backend; the policy's
``env`` is added on top. Nothing is inherited from the host."""


class BackendOptions(BaseModel):
    """Base class of each backend's typed options."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class CancelToken:
    """Set by the caller to ask a running execution to kill its sandbox and return."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float) -> bool:
        return self._event.wait(timeout)


@dataclass(frozen=True, slots=True)
class ExecRequest:
    """One call: code, inputs and the policy to apply. Validated before it reaches a backend."""

    run_id: str
    language: Language
    code: str
    policy: Policy
    files: Mapping[str, bytes] = field(default_factory=dict)
    """Input files, placed read-only in the working directory beside the code."""
    stdin: bytes | None = None

    @property
    def code_filename(self) -> str:
        return CODE_FILENAMES[self.language]


@dataclass(frozen=True, slots=True)
class RawOutcome:
    """What a backend observed, before sanitising. Never shown to a model as is."""

    exit_code: int
    stdout: bytes
    stderr: bytes
    stdout_truncated: bool
    stderr_truncated: bool
    timed_out: bool
    killed_reason: KilledReason | None
    duration_ms: float
    limits_enforced_by: LimitsEnforcement
    limits_hit: tuple[str, ...] = ()
    violations: tuple[str, ...] = ()
    """What the sandbox blocked, where the backend can tell (e.g. ``"pids limit"``)."""
    host_secrets: tuple[str, ...] = ()
    """Strings the backend knows are host details (image paths, container ids) and that
    the sanitiser must redact from what the model sees."""


@dataclass(frozen=True, slots=True)
class HostCheck:
    """One line of ``cellblock doctor``: what was checked, whether it passed, how to fix."""

    name: str
    status: Literal["ok", "warn", "fail"]
    detail: str
    fix: str | None = None


class Backend(ABC):
    """An isolation technology. Subclasses register with :func:`register_backend`."""

    name: ClassVar[str]
    options_type: ClassVar[type[BackendOptions]] = BackendOptions

    def __init__(self, options: BackendOptions | None = None) -> None:
        self.options = options if options is not None else self.options_type()

    @abstractmethod
    def execute(self, request: ExecRequest, cancel: CancelToken) -> RawOutcome:
        """Run one request in a fresh sandbox and destroy it before returning.

        Blocking. Must return promptly after ``cancel`` is set, with
        ``killed_reason="cancelled"``, having destroyed the sandbox.
        """

    def prepare(self, policy: Policy) -> None:  # noqa: B027 - optional hook
        """Check that this backend can enforce ``policy`` here; raise if not.

        Called once per Sandbox so that misconfiguration fails at construction, not on
        the first call. The default does nothing.
        """

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release long-lived resources (pools, clients). Idempotent."""

    @classmethod
    def host_checks(cls) -> list[HostCheck]:
        """What ``cellblock doctor`` reports for this backend."""
        return []
