"""The syscalls every cellblock sandbox is denied, in one place.

Both the bwrap backend (compiled to BPF through libseccomp) and the Docker backend
(rendered as a Docker seccomp JSON profile) use this list, so every backend blocks the
same things and the conformance suite can check them all the same way.

Why a deny list and not an allow list: the sandbox runs arbitrary interpreters and
tools (python, bash, coreutils, whatever packages the image has). An allow list tuned
for one workload breaks another in ways agents then try to "work around". The deny list
below covers the kernel attack surface that no legitimate analysis code needs:
namespace and mount manipulation, tracing, kernel keyrings, BPF, perf, userfaultfd,
io_uring, raw packet sockets, module loading, clock and host administration.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "AF_PACKET",
    "ARG_RULES",
    "CLONE_NAMESPACE_FLAGS",
    "DENIED_SYSCALLS",
    "ENOSYS_SYSCALLS",
    "ArgCond",
    "ArgRule",
    "docker_profile",
]

# Denied outright with EPERM.
DENIED_SYSCALLS: tuple[str, ...] = (
    # tracing and cross-process memory access
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
    # mounts and filesystem namespaces
    "mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen",
    "fsconfig", "fsmount", "fspick", "mount_setattr",
    # namespaces
    "unshare", "setns",
    # kernel keyrings
    "keyctl", "add_key", "request_key",
    # BPF, perf, userfaultfd, io_uring
    "bpf", "perf_event_open", "userfaultfd",
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    # kernel modules, kexec, reboot, swap, accounting
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
    "reboot", "swapon", "swapoff", "acct",
    # host clock and identity
    "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "sethostname",
    "setdomainname",
    # file handles bypass path-based checks
    "open_by_handle_at", "name_to_handle_at",
    # NUMA placement, old and obscure interfaces
    "mbind", "set_mempolicy", "migrate_pages", "move_pages", "lookup_dcookie",
    "quotactl", "nfsservctl", "uselib", "ustat", "sysfs", "_sysctl", "vhangup",
    "iopl", "ioperm",
    # fanotify watches host-wide file activity
    "fanotify_init",
)

# clone3 passes its flags in a struct that seccomp cannot inspect. Returning ENOSYS makes
# glibc fall back to clone(), whose flags argument we *can* inspect (see below).
ENOSYS_SYSCALLS: tuple[str, ...] = ("clone3",)

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
CLONE_NEWTIME = 0x00000080
CLONE_NAMESPACE_FLAGS = (
    CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER
    | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWTIME
)

AF_INET = 2
AF_INET6 = 10
AF_PACKET = 17
SOCK_RAW = 3
TIOCSTI = 0x5412
TIOCLINUX = 0x541C


@dataclass(frozen=True, slots=True)
class ArgCond:
    """One argument comparison. ``masked_eq``: ``args[arg] & mask == value``;
    ``eq``: ``args[arg] == value``."""

    arg: int
    op: Literal["eq", "masked_eq"]
    value: int
    mask: int = 0


@dataclass(frozen=True, slots=True)
class ArgRule:
    """Deny ``syscall`` with EPERM when *all* its conditions hold."""

    syscall: str
    conds: tuple[ArgCond, ...]


# Argument-level denials.
ARG_RULES: tuple[ArgRule, ...] = (
    # clone() with any namespace flag: no new namespaces from inside the sandbox.
    *(
        ArgRule("clone", (ArgCond(0, "masked_eq", flag, flag),))
        for flag in (
            CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER,
            CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWTIME,
        )
    ),
    # Packet sockets see and forge raw frames.
    ArgRule("socket", (ArgCond(0, "eq", AF_PACKET),)),
    # Raw IP sockets (the low bits of the type argument are the socket type; the high
    # bits are SOCK_NONBLOCK / SOCK_CLOEXEC). Netlink raw sockets stay allowed: glibc
    # uses them to enumerate interfaces.
    ArgRule("socket", (ArgCond(0, "eq", AF_INET), ArgCond(1, "masked_eq", SOCK_RAW, 0xF))),
    ArgRule("socket", (ArgCond(0, "eq", AF_INET6), ArgCond(1, "masked_eq", SOCK_RAW, 0xF))),
    # Terminal injection into a controlling terminal.
    ArgRule("ioctl", (ArgCond(1, "eq", TIOCSTI),)),
    ArgRule("ioctl", (ArgCond(1, "eq", TIOCLINUX),)),
)

DENY_ERRNO = errno.EPERM


def docker_profile() -> dict[str, object]:
    """The same rules as a Docker seccomp profile (JSON-serialisable).

    Default action is allow; every rule above becomes an errno action. Docker applies
    it in place of its default profile, which is why the list above is a superset of
    the dangerous calls Docker's own default profile blocks.
    """
    syscalls: list[dict[str, object]] = [
        {"names": list(DENIED_SYSCALLS), "action": "SCMP_ACT_ERRNO",
         "errnoRet": DENY_ERRNO},
        {"names": list(ENOSYS_SYSCALLS), "action": "SCMP_ACT_ERRNO",
         "errnoRet": errno.ENOSYS},
    ]
    for rule in ARG_RULES:
        args: list[dict[str, object]] = []
        for c in rule.conds:
            if c.op == "masked_eq":
                # Docker's JSON puts the mask in "value" and the datum in "valueTwo".
                args.append({"index": c.arg, "op": "SCMP_CMP_MASKED_EQ", "value": c.mask,
                             "valueTwo": c.value})
            else:
                args.append({"index": c.arg, "op": "SCMP_CMP_EQ", "value": c.value})
        syscalls.append(
            {"names": [rule.syscall], "action": "SCMP_ACT_ERRNO", "errnoRet": DENY_ERRNO,
             "args": args}
        )
    # Only the native architecture: syscalls through a foreign ABI (int 0x80, x32) hit
    # the "bad architecture" action, which kills the process.
    return {
        "defaultAction": "SCMP_ACT_ALLOW",
        "architectures": ["SCMP_ARCH_X86_64"],
        "syscalls": syscalls,
    }
