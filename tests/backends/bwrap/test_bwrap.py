"""bwrap-specific behaviour beyond the conformance suite: pool, cgroups, fail-closed."""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

import pytest

from cellblock import Policy, Sandbox
from cellblock.backends.bwrap import BwrapOptions
from cellblock.backends.bwrap.cgroups import detect_cgroups
from cellblock.backends.bwrap.seccomp import SeccompUnavailable
from cellblock.errors import ProtectionUnavailable
from tests.conftest import require
from tests.helpers import require_default_image

pytestmark = pytest.mark.integration


def bwrap_processes() -> list[str]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes().split(b"\0")[0]
            except OSError:
                continue
            if cmd.endswith(b"bwrap"):
                out.append(entry.name)
    return out


def test_pool_sandboxes_are_used_once_and_cleaned_up() -> None:
    require_default_image()
    before = set(bwrap_processes())
    sb = Sandbox("bwrap", options=BwrapOptions(pool_size=2))
    seen: set[str] = set()
    for _ in range(6):
        r = sb.run("import os\nprint(os.stat('/work').st_ino, open('/proc/1/stat').read().split()[21])")
        assert r.exit_code == 0, r
        # A sandbox identity: its /work tmpfs inode and the start time of its init.
        assert r.stdout not in seen, "a sandbox was reused"
        seen.add(r.stdout)
        # What the previous call wrote is never there.
        r = sb.run("import os\nprint(sorted(os.listdir('.')))\nopen('left-behind', 'w').write('x')")
        assert r.stdout.strip() == "['main.py']", r
    sb.close()
    time.sleep(0.2)
    assert set(bwrap_processes()) <= before, "pool left bwrap processes after close()"


def test_pool_entries_expire() -> None:
    require_default_image()
    sb = Sandbox("bwrap", options=BwrapOptions(pool_size=1, pool_max_age_s=0.2))
    assert sb.run("print(1)").stdout == "1\n"
    time.sleep(0.6)  # the pooled sandbox is now too old and must be replaced, not used
    assert sb.run("print(2)").stdout == "2\n"
    sb.close()


def test_cgroups_enforce_limits_as_root() -> None:
    require_default_image()
    require(os.geteuid() == 0, "cgroups need root")
    require(detect_cgroups() is not None, "no writable cgroup hierarchy")
    with Sandbox("bwrap", Policy(memory_mb=64)) as sb:
        r = sb.run("print(1)")
    assert r.limits_enforced_by == "cgroup"
    for parent in (Path("/sys/fs/cgroup/memory/cellblock"), Path("/sys/fs/cgroup/cellblock")):
        if parent.is_dir():
            deadline = time.monotonic() + 10
            while [p for p in parent.iterdir() if p.is_dir()] and time.monotonic() < deadline:
                time.sleep(0.05)
            assert not [p for p in parent.iterdir() if p.is_dir()], "per-call cgroups left behind"


def test_seccomp_missing_fails_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    require_default_image()
    from cellblock.backends.bwrap import backend as backend_mod

    def broken() -> bytes:
        raise SeccompUnavailable("libseccomp missing (simulated)")

    monkeypatch.setattr(backend_mod, "compiled_filter", broken)
    with pytest.raises(ProtectionUnavailable) as exc:
        Sandbox("bwrap")
    assert exc.value.protection == "seccomp"
    # An explicit opt-out runs, without the filter.
    with Sandbox("bwrap", Policy(unsafe_allow_missing={"seccomp"}),
                 options=BwrapOptions(pool_size=0)) as sb:
        assert sb.run("print('ran')").stdout == "ran\n"


def test_no_leftovers_after_many_calls_with_timeouts() -> None:
    require_default_image()
    before = set(bwrap_processes())
    with Sandbox("bwrap", Policy(timeout_s=0.5)) as sb:
        for i in range(20):
            code = "while True: pass" if i % 4 == 0 else "print(1)"
            r = sb.run(code)
            assert r.killed_reason == ("timeout" if i % 4 == 0 else None)
    time.sleep(0.2)
    assert set(bwrap_processes()) <= before




def launcher_pids() -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if b"-I\0-S\0-c\0" in cmd and b"recv_fds" in cmd:
                out.append(int(entry.name))
    return out


def test_launcher_is_replaced_when_killed_and_gone_after_close() -> None:
    require_default_image()
    before = set(launcher_pids())
    sb = Sandbox("bwrap", options=BwrapOptions(pool_size=0), recorder=None)
    assert sb.run("print(1)").stdout == "1\n"
    ours = set(launcher_pids()) - before
    assert len(ours) == 1
    os.kill(ours.pop(), 9)
    time.sleep(0.1)
    # A new launcher takes over; the call still works.
    assert sb.run("print(2)").stdout == "2\n"
    sb.close()
    deadline = time.monotonic() + 5
    while set(launcher_pids()) - before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not set(launcher_pids()) - before, "launcher left running after close()"


def test_sandbox_rlimits_come_from_the_launcher() -> None:
    require_default_image()
    with Sandbox("bwrap", options=BwrapOptions(nofile=128), recorder=None) as sb:
        r = sb.run("ulimit -Hc; ulimit -Hn", language="bash")
    assert r.stdout.split() == ["0", "128"], r


def test_rlimit_fallback_without_cgroups(monkeypatch: pytest.MonkeyPatch) -> None:
    require_default_image()
    from cellblock.backends.bwrap import backend as backend_mod

    monkeypatch.setattr(backend_mod, "detect_cgroups", lambda: None)
    policy = Policy(memory_mb=128, max_pids=20, unsafe_allow_missing={"cgroups"})
    with Sandbox("bwrap", policy, recorder=None) as sb:
        r = sb.run("ulimit -Hv; ulimit -Hf; ulimit -Hu", language="bash")
        bomb = sb.run("x = bytearray(512 * 1024 * 1024)")
        # Memory outside the heap: a memfd is bounded by the file-size limit.
        memfd = sb.run("import os\nfd = os.memfd_create('bomb')\nn = 0\n"
                       "try:\n    while n < 1024:\n        os.write(fd, b'x' * 1048576)\n"
                       "        n += 1\nexcept OSError as e:\n    print(n, e.errno)\n")
    assert r.limits_enforced_by == "rlimit"
    # As root each sandbox has a host uid of its own, so the process limit is exact.
    assert r.stdout.split() == [str(128 * 1024), str(128 * 1024), "20"], r
    # Without a cgroup the kernel refuses the allocation instead of killing the tree.
    assert bomb.exit_code == 1 and "MemoryError" in bomb.stderr, bomb
    assert memfd.exit_code == 0 and memfd.stdout.split() == ["128", str(errno.EFBIG)], memfd


def test_no_cgroup_is_refused_unless_the_policy_opts_out(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail closed: rlimits do not bound a sandbox tree's memory, so they are only a
    fallback the caller asks for."""
    require_default_image()
    from cellblock.backends.bwrap import backend as backend_mod

    monkeypatch.setattr(backend_mod, "detect_cgroups", lambda: None)
    with pytest.raises(ProtectionUnavailable) as info:
        Sandbox("bwrap", Policy(), recorder=None)
    assert info.value.protection == "cgroups"
    assert "unsafe_allow_missing" in (info.value.hint or "")
    with Sandbox("bwrap", Policy(unsafe_allow_missing={"cgroups"}), recorder=None) as sb:
        assert sb.run("print(1)").stdout == "1\n"
        with pytest.raises(ProtectionUnavailable):
            sb.run("print(2)", policy=Policy())


_READ_PROC = (
    "import json, os\n"
    "def read(p):\n"
    "    try:\n"
    "        return open(p).read()\n"
    "    except OSError as e:\n"
    "        return f'error {e.errno}'\n"
    "out = {n: read('/proc/' + n) for n in ('stat', 'loadavg', 'uptime', 'meminfo', 'vmstat',"
    " 'interrupts')}\n"
    "out['pressure'] = os.listdir('/proc/pressure') if os.path.isdir('/proc/pressure') else None\n"
    "out['self'] = os.readlink('/proc/self') != ''\n"
    "print(json.dumps(out))\n"
)


def test_host_wide_proc_files_are_fixed_views() -> None:
    """A covert channel between concurrent sandboxes (20 bit/s through /proc/stat): each
    sandbox sees an idle machine with its own memory limit instead of the host."""
    require_default_image()
    import json

    with Sandbox("bwrap", Policy(memory_mb=96), recorder=None) as sb:
        seen = json.loads(sb.run(_READ_PROC).stdout)
    assert seen["stat"].startswith("cpu  0 0 0 0 0 0 0 0 0 0\ncpu0 ")
    assert seen["loadavg"] == "0.00 0.00 0.00 1/1 1\n"
    assert seen["uptime"] == "0.00 0.00\n"
    assert "MemTotal:          98304 kB" in seen["meminfo"]
    assert "MemAvailable:      98304 kB" in seen["meminfo"]
    assert seen["vmstat"] == "" and seen["interrupts"] == ""
    assert seen["pressure"] in (None, [])  # hidden, where the host has it
    assert seen["self"]  # the sandbox's own processes are still there


def test_host_proc_views_can_be_turned_off() -> None:
    require_default_image()
    import json

    options = BwrapOptions(hide_host_proc=False)
    with Sandbox("bwrap", Policy(), options=options, recorder=None) as sb:
        seen = json.loads(sb.run(_READ_PROC).stdout)
    assert not seen["stat"].startswith("cpu  0 0 0 0 0 0 0 0 0 0")
    assert seen["vmstat"] != ""
