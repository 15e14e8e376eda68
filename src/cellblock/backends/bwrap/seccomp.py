"""Compile the shared deny list (:mod:`cellblock.backends.seccomp_rules`) to a BPF program.

We bind the few libseccomp functions we need with ctypes instead of depending on a
third-party wrapper: libseccomp itself (``libseccomp.so.2``, part of every Debian base
system) does the compiling, including the architecture check that kills syscalls made
through a foreign ABI (``int 0x80``, x32). The program is compiled once per process and
handed to bwrap (``--seccomp FD``) as bytes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import tempfile

from cellblock.backends.seccomp_rules import (
    ARG_RULES,
    DENIED_SYSCALLS,
    DENY_ERRNO,
    ENOSYS_SYSCALLS,
)
from cellblock.errors import ProtectionUnavailable

__all__ = ["SeccompUnavailable", "compiled_filter"]

_SCMP_ACT_ALLOW = 0x7FFF0000
_SCMP_CMP_EQ = 4
_SCMP_CMP_MASKED_EQ = 7


def _act_errno(err: int) -> int:
    return 0x00050000 | (err & 0xFFFF)


class _ArgCmp(ctypes.Structure):
    _fields_ = (
        ("arg", ctypes.c_uint),
        ("op", ctypes.c_int),
        ("datum_a", ctypes.c_uint64),
        ("datum_b", ctypes.c_uint64),
    )


class SeccompUnavailable(ProtectionUnavailable):
    def __init__(self, detail: str) -> None:
        super().__init__(
            "seccomp",
            detail=detail,
            hint="install libseccomp2 (apt-get install libseccomp2), or opt out explicitly "
            "with Policy(unsafe_allow_missing={'seccomp'})",
        )


def _load() -> ctypes.CDLL:
    name = ctypes.util.find_library("seccomp") or "libseccomp.so.2"
    try:
        lib = ctypes.CDLL(name, use_errno=True)
    except OSError as exc:
        raise SeccompUnavailable(f"cannot load libseccomp: {exc}") from exc
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = (ctypes.c_uint32,)
    lib.seccomp_release.argtypes = (ctypes.c_void_p,)
    lib.seccomp_syscall_resolve_name.argtypes = (ctypes.c_char_p,)
    lib.seccomp_syscall_resolve_name.restype = ctypes.c_int
    lib.seccomp_rule_add_array.argtypes = (
        ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint, ctypes.POINTER(_ArgCmp),
    )
    lib.seccomp_rule_add_array.restype = ctypes.c_int
    lib.seccomp_export_bpf.argtypes = (ctypes.c_void_p, ctypes.c_int)
    lib.seccomp_export_bpf.restype = ctypes.c_int
    return lib


@functools.cache
def compiled_filter() -> bytes:
    """The BPF program (``struct sock_filter[]``) bwrap loads with ``--seccomp``.

    Raises:
        SeccompUnavailable: libseccomp is missing or refused a rule.
    """
    lib = _load()
    ctx = lib.seccomp_init(_SCMP_ACT_ALLOW)
    if not ctx:
        raise SeccompUnavailable("seccomp_init failed")
    try:
        for name in DENIED_SYSCALLS:
            _add(lib, ctx, name, _act_errno(DENY_ERRNO), ())
        for name in ENOSYS_SYSCALLS:
            _add(lib, ctx, name, _act_errno(38), ())  # ENOSYS
        for rule in ARG_RULES:
            conds = tuple(
                (c.arg, _SCMP_CMP_MASKED_EQ, c.mask, c.value)
                if c.op == "masked_eq"
                else (c.arg, _SCMP_CMP_EQ, c.value, 0)
                for c in rule.conds
            )
            _add(lib, ctx, rule.syscall, _act_errno(DENY_ERRNO), conds)
        with tempfile.TemporaryFile() as fh:
            rc = lib.seccomp_export_bpf(ctx, fh.fileno())
            if rc < 0:
                raise SeccompUnavailable(f"seccomp_export_bpf failed: {os.strerror(-rc)}")
            fh.seek(0)
            program = fh.read()
    finally:
        lib.seccomp_release(ctx)
    # Each BPF instruction is 8 bytes; an empty or ragged program means something broke.
    if not program or len(program) % 8:
        raise SeccompUnavailable("libseccomp produced an invalid BPF program")
    return program


def _add(
    lib: ctypes.CDLL,
    ctx: int,
    name: str,
    action: int,
    conds: tuple[tuple[int, int, int, int], ...],
) -> None:
    nr = lib.seccomp_syscall_resolve_name(name.encode())
    if nr < 0:
        # Not a syscall on this architecture (e.g. a 32-bit-only call): nothing to deny.
        return
    array = (_ArgCmp * max(1, len(conds)))(*(_ArgCmp(*c) for c in conds))
    rc = lib.seccomp_rule_add_array(ctx, action, nr, len(conds), array)
    if rc < 0:
        raise SeccompUnavailable(f"libseccomp rejected the rule for {name}: {os.strerror(-rc)}")
