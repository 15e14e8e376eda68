import json

from cellblock.backends.bwrap.seccomp import compiled_filter
from cellblock.backends.seccomp_rules import (
    ARG_RULES,
    CLONE_NEWUSER,
    DENIED_SYSCALLS,
    docker_profile,
)

REQUIRED = {"ptrace", "mount", "unshare", "setns", "keyctl", "bpf", "perf_event_open",
            "userfaultfd", "io_uring_setup", "process_vm_writev", "pivot_root"}


def test_deny_list_covers_the_issue_minimum() -> None:
    assert set(DENIED_SYSCALLS) >= REQUIRED
    assert any(r.syscall == "clone" and r.conds[0].value == CLONE_NEWUSER for r in ARG_RULES)
    assert any(r.syscall == "socket" and r.conds[0].value == 17 for r in ARG_RULES)  # AF_PACKET


def test_docker_profile_is_valid_json_with_errno_actions() -> None:
    profile = docker_profile()
    json.dumps(profile)
    assert profile["defaultAction"] == "SCMP_ACT_ALLOW"
    rules = profile["syscalls"]
    assert isinstance(rules, list)
    names = {n for rule in rules for n in rule["names"]}
    assert names >= REQUIRED
    assert all(rule["action"] == "SCMP_ACT_ERRNO" for rule in rules)
    masked = [a for rule in rules for a in rule.get("args", []) if a["op"] == "SCMP_CMP_MASKED_EQ"]
    # Docker's JSON: "value" is the mask, "valueTwo" the datum.
    assert any(a["value"] == CLONE_NEWUSER and a["valueTwo"] == CLONE_NEWUSER for a in masked)


def test_libseccomp_compiles_the_filter() -> None:
    program = compiled_filter()
    assert len(program) % 8 == 0
    assert len(program) // 8 > len(DENIED_SYSCALLS)  # one compare per syscall at least
