"""What a sandbox call returns to its caller (and, through integrations, to the model)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

__all__ = ["ExecResult", "KilledReason", "LimitsEnforcement"]

KilledReason = Literal["timeout", "memory", "pids", "output", "cancelled"]
"""Why cellblock (or the kernel on its behalf) killed the sandbox.

``timeout``: the wall-clock limit fired. ``memory``: the memory limit fired (OOM kill).
``pids``: the process limit was hit, so the sandbox was stopped (a fork bomb never gets to
spin until the timeout). ``output``: a stream went past ``output_limit_bytes``.
``cancelled``: the caller cancelled the call.
"""

LimitsEnforcement = Literal["cgroup", "rlimit", "engine"]
"""How memory and process limits were enforced: a cgroup per call (exact, whole tree),
rlimits (weaker, per process or per uid), or the container engine (its own cgroup)."""


class ExecResult(BaseModel):
    """The outcome of one sandbox call.

    A non-zero ``exit_code`` is a normal result, not an error. ``stdout`` and ``stderr`` are
    what the model may see: decoded as UTF-8 (invalid bytes replaced), capped at the
    policy's output limit and sanitised of host details.

    When the sandbox was killed, ``exit_code`` follows the shell convention 128 + signal
    (137 for SIGKILL) and ``killed_reason`` says why.
    """

    model_config = ConfigDict(frozen=True)

    run_id: str
    """Unique id of this call; the key of its run record in the log."""
    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool
    killed_reason: KilledReason | None
    truncated: bool
    """True when either stream was cut at ``output_limit_bytes``."""
    duration_ms: float
    """Wall time of the sandboxed program, from start to the death of its last process."""
    backend: str
    limits_enforced_by: LimitsEnforcement
    limits_hit: tuple[str, ...] = ()
    """Every limit that fired during the call (e.g. ``("pids",)``), even if the program
    survived it; ``killed_reason`` is the one that ended it."""

    @property
    def ok(self) -> bool:
        """True when the program exited 0 and nothing killed it."""
        return self.exit_code == 0 and self.killed_reason is None

    def to_model_text(self) -> str:
        """A compact, honest rendering for a model's tool output."""
        parts: list[str] = []
        if self.stdout:
            parts.append(self.stdout.rstrip("\n"))
        if self.stderr:
            parts.append("[stderr]\n" + self.stderr.rstrip("\n"))
        status = f"[exit code {self.exit_code}]"
        if self.killed_reason:
            status += f" [killed: {self.killed_reason} limit]"
        if self.truncated:
            status += " [output truncated]"
        parts.append(status)
        return "\n".join(parts)
