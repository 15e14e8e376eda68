"""The one policy type: what a sandbox call may do and how much of everything it gets.

A :class:`Policy` is frozen and validated. Defaults deny: no network, nothing inherited
from the host environment, small limits. Shorthands are accepted at the boundary
(``network="none"``) and normalised into typed models.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_serializer, field_validator, model_validator

__all__ = ["Language", "NetworkPolicy", "Policy", "Protection"]

Language = Literal["python", "bash"]
"""Languages a sandbox can run."""

Protection = Literal["seccomp", "cgroups"]
"""Protections a user may explicitly opt out of with ``Policy.unsafe_allow_missing``.

``seccomp``: run even if no seccomp filter can be installed.

``cgroups``: run even if no cgroup can be created for the call (cellblock not running
as root, or no writable cgroup hierarchy). Memory and pids limits then fall back to
rlimits, which are per process and per user, not per sandbox tree: ``RLIMIT_AS`` bounds
each process's address space, ``RLIMIT_FSIZE`` each file (a memfd or a scratch file),
``RLIMIT_NPROC`` the processes of the whole host uid. A sandbox can then hold more memory
than ``memory_mb`` (several processes, several files) and a limit makes the kernel refuse
an allocation or a fork instead of killing the tree. Every result says which mechanism
enforced its limits in ``limits_enforced_by``.
"""

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Variables the runner sets itself; letting the caller override them would let a policy
# point the sandbox at host paths or tools.
_RESERVED_ENV = frozenset({"PATH", "HOME", "TMPDIR", "PWD"})


class NetworkPolicy(BaseModel):
    """Network access for the sandbox.

    ``mode="none"`` (the default) gives the sandbox a private network namespace with
    nothing but its own loopback: no route anywhere.

    ``mode="allowlist"`` is reserved for egress through the cellblock proxy over a Unix
    socket; backends that cannot provide it refuse to run (fail closed).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    mode: Literal["none", "allowlist"] = "none"
    """``none`` or ``allowlist``."""
    allow: tuple[str, ...] = ()
    """Host names (optionally ``host:port``) reachable through the proxy in allowlist mode."""

    @model_validator(mode="after")
    def _check(self) -> NetworkPolicy:
        if self.mode == "none" and self.allow:
            raise ValueError("network mode 'none' takes no allow list")
        if self.mode == "allowlist" and not self.allow:
            raise ValueError("network mode 'allowlist' needs at least one allowed host")
        return self


class Policy(BaseModel):
    """Limits and permissions of one sandbox call. Frozen; deny by default.

    Example::

        Policy(timeout_s=5, memory_mb=128, env={"MODE": "test"})
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    timeout_s: Annotated[float, Field(gt=0, le=3600)] = 10
    """Wall-clock limit in seconds. When it fires, every process of the sandbox dies."""
    memory_mb: Annotated[int, Field(ge=16, le=65536)] = 256
    """Memory limit (RAM plus swap, plus scratch tmpfs pages) in MiB."""
    max_pids: Annotated[int, Field(ge=4, le=32768)] = 64
    """Maximum number of processes and threads alive at once."""
    scratch_mb: Annotated[int, Field(ge=1, le=65536)] = 64
    """Size cap of each writable scratch mount (cwd, /tmp, /dev/shm) in MiB; all of it is
    discarded with the sandbox and also counts against ``memory_mb``."""
    output_limit_bytes: Annotated[int, Field(ge=1024, le=256 * 1024 * 1024)] = 64 * 1024
    """Cap per stream (stdout, stderr). Beyond it the sandbox is killed and the output
    marked truncated."""
    network: NetworkPolicy = NetworkPolicy()
    """Network access; ``"none"`` by default. Accepts the shorthand string ``"none"``."""
    env: Mapping[str, str] = Field(default_factory=dict, validate_default=True)
    """Environment of the sandboxed program on top of a fixed minimal base (PATH, HOME,
    LANG, TMPDIR). Nothing is inherited from the host."""
    unsafe_allow_missing: frozenset[Protection] = frozenset()
    """Protections the caller explicitly accepts running without. Empty by default: when
    a protection cannot be applied the call is refused."""

    @field_validator("network", mode="before")
    @classmethod
    def _network_shorthand(cls, value: Any) -> Any:
        if isinstance(value, str):
            if value == "none":
                return NetworkPolicy()
            raise ValueError(f"unknown network shorthand {value!r}; use 'none' or NetworkPolicy")
        return value

    @field_validator("env", mode="after")
    @classmethod
    def _check_env(cls, value: Mapping[str, str]) -> Mapping[str, str]:
        for name, val in value.items():
            if not _ENV_NAME.match(name):
                raise ValueError(f"invalid environment variable name {name!r}")
            if name in _RESERVED_ENV:
                raise ValueError(f"environment variable {name} is set by the sandbox itself")
            if "\0" in val:
                raise ValueError(f"environment variable {name} contains a NUL byte")
        # A plain dict inside a frozen model could still be mutated by the caller.
        return _FrozenEnv(value)

    @field_serializer("env")
    def _serialize_env(self, value: Mapping[str, str]) -> dict[str, str]:
        return dict(value)


class _FrozenEnv(Mapping[str, str]):
    """An immutable, hashable mapping, so a frozen Policy stays frozen and hashable."""

    __slots__ = ("_data",)

    def __init__(self, data: Mapping[str, str]) -> None:
        self._data = dict(data)

    def __getitem__(self, key: str) -> str:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._data.items())))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mapping) and dict(self._data) == dict(other)

    def __repr__(self) -> str:
        return repr(self._data)
