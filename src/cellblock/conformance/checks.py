"""The checks. Each takes a :class:`Harness` and raises :class:`CheckFailed` with evidence.

Checks are plain functions so that the same list runs under pytest (one test per check
per backend), from ``cellblock selfcheck`` and from ``cellblock audit`` later on.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from cellblock.backends.base import BackendOptions
from cellblock.errors import CellblockError
from cellblock.policy import Policy, Protection
from cellblock.result import ExecResult
from cellblock.sandbox import Sandbox

__all__ = ["CHECKS", "Check", "CheckFailed", "CheckOutcome", "Harness", "run_checks"]


class CheckFailed(AssertionError):
    """A guarantee does not hold; the message carries the evidence."""


@dataclass(frozen=True)
class CheckOutcome:
    name: str
    passed: bool
    detail: str
    seconds: float


@dataclass(frozen=True)
class Check:
    name: str
    description: str
    func: Callable[[Harness], None]


class Harness:
    """What a check gets: sandboxes on the backend under test."""

    def __init__(self, backend: str, options: BackendOptions | None = None,
                 allow_missing: frozenset[Protection] = frozenset()) -> None:
        """``allow_missing``: protections every check's policy opts out of (the
        operator's choice for this host, e.g. ``cgroups`` when not running as root); the
        checks then expect the weaker guarantee, as documented for each."""
        self.backend = backend
        self.options = options
        self.allow_missing = allow_missing
        self._sandboxes: dict[Policy, Sandbox] = {}
        self._lock = threading.Lock()

    def sandbox(self, policy: Policy | None = None) -> Sandbox:
        policy = policy or Policy(timeout_s=20)
        if self.allow_missing:
            policy = policy.model_copy(update={
                "unsafe_allow_missing": policy.unsafe_allow_missing | self.allow_missing})
        with self._lock:
            if policy not in self._sandboxes:
                self._sandboxes[policy] = Sandbox(self.backend, policy, options=self.options,
                                                  agent_id="conformance", recorder=None)
            return self._sandboxes[policy]

    def run(self, code: str, *, policy: Policy | None = None, **kwargs: object) -> ExecResult:
        return self.sandbox(policy).run(code, **kwargs)  # type: ignore[arg-type]

    def close(self) -> None:
        with self._lock:
            boxes = list(self._sandboxes.values())
            self._sandboxes.clear()
        for box in boxes:
            box.close()


CHECKS: list[Check] = []


def check(description: str) -> Callable[[Callable[[Harness], None]], Callable[[Harness], None]]:
    def register(func: Callable[[Harness], None]) -> Callable[[Harness], None]:
        CHECKS.append(Check(func.__name__.removeprefix("check_"), description, func))
        return func

    return register


def expect(condition: bool, message: str, result: ExecResult | None = None) -> None:
    if not condition:
        if result is not None:
            message += (
                f" [exit={result.exit_code} killed={result.killed_reason} "
                f"stdout={result.stdout[-400:]!r} stderr={result.stderr[-400:]!r}]"
            )
        raise CheckFailed(message)


def json_out(result: ExecResult) -> dict[str, object]:
    try:
        value = json.loads(result.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError) as exc:
        raise CheckFailed(f"expected JSON on stdout, got {result.stdout[-300:]!r} "
                          f"stderr={result.stderr[-300:]!r}") from exc
    if not isinstance(value, dict):
        raise CheckFailed(f"expected a JSON object, got {value!r}")
    return value


def host_processes_with(marker: str) -> list[str]:
    """Command lines of host processes containing ``marker`` (the host's view)."""
    found: list[str] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline:
            found.append(f"{entry.name}: {cmdline.strip()}")
    return found


# -- results and I/O --------------------------------------------------------------------


@check("stdout, stderr and the exit code come back separately and exactly")
def check_streams_and_exit_code(h: Harness) -> None:
    r = h.run("import sys\nprint('to-out')\nprint('to-err', file=sys.stderr)\nsys.exit(3)")
    expect(r.stdout == "to-out\n", "stdout mismatch", r)
    expect(r.stderr == "to-err\n", "stderr mismatch", r)
    expect(r.exit_code == 3 and r.killed_reason is None, "exit code 3 expected", r)
    r = h.run("echo from-bash; echo oops >&2; exit 4", language="bash")
    expect((r.stdout, r.stderr, r.exit_code) == ("from-bash\n", "oops\n", 4), "bash", r)


@check("a traceback names the code file neutrally, never a host path")
def check_traceback_is_neutral(h: Harness) -> None:
    r = h.run("def f():\n    raise ValueError('boom')\nf()")
    expect(r.exit_code == 1 and "ValueError: boom" in r.stderr, "traceback expected", r)
    expect('File "/work/main.py", line 2' in r.stderr, "code file should be /work/main.py", r)


@check("stdin is delivered, and absent stdin reads as EOF")
def check_stdin(h: Harness) -> None:
    data = "line one\nline two\n" * 5000  # larger than a pipe buffer
    r = h.run("import sys\nd = sys.stdin.read()\nprint(len(d), d.count('two'))", stdin=data)
    expect(r.stdout.strip() == f"{len(data)} 5000", "stdin content", r)
    r = h.run("import sys\nprint(repr(sys.stdin.read()))")
    expect(r.stdout.strip() == "''", "empty stdin should be EOF", r)


@check("input files are readable beside the code and read-only")
def check_files_read_only(h: Harness) -> None:
    code = (
        "import json, os\n"
        "out = {'data': open('data.csv').read()}\n"
        "for path in ('data.csv', '/work/main.py'):\n"
        "    try:\n"
        "        open(path, 'a').write('x')\n"
        "        out[path] = 'written'\n"
        "    except OSError as e:\n"
        "        out[path] = e.errno\n"
        "print(json.dumps(out))"
    )
    r = h.run(code, files={"data.csv": b"a,b\n1,2\n"})
    out = json_out(r)
    expect(out["data"] == "a,b\n1,2\n", "input file content", r)
    for path in ("data.csv", "/work/main.py"):
        expect(out[path] in (13, 30), f"{path} must be read-only (EACCES/EROFS)", r)


@check("output beyond the cap is cut, flagged, and the flood is stopped")
def check_output_cap(h: Harness) -> None:
    policy = Policy(timeout_s=20, output_limit_bytes=4096)
    r = h.run("import sys\nwhile True: sys.stdout.write('x' * 65536)", policy=policy)
    expect(r.truncated, "truncated flag", r)
    expect(len(r.stdout.encode()) <= 4096, "stdout longer than the cap", r)
    expect(r.killed_reason == "output", "a flood must be killed for output", r)
    r = h.run("import sys\nsys.stderr.write('e' * 100000)", policy=policy)
    expect(r.truncated and len(r.stderr.encode()) <= 4096, "stderr cap", r)


# -- limits --------------------------------------------------------------------------------

_DAEMONS = r"""
set -u
M={marker}
# plain background, setsid, nohup, double fork, and one that ignores SIGTERM
(exec -a "$M-bg" sleep 1000) &
setsid bash -c "exec -a $M-setsid sleep 1000" &
nohup bash -c "exec -a $M-nohup sleep 1000" >/dev/null 2>&1 &
( ( exec -a "$M-double" sleep 1000 ) & ) &
bash -c "trap '' TERM; exec -a $M-trap sleep 1000" &
python3 -c "import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        import sys; sys.argv[0] = '$M'
        time.sleep(1000)
" &
echo started
while true; do :; done
"""


@check("the timeout kills the whole tree: setsid, double fork, nohup, SIGTERM traps")
def check_timeout_kills_tree(h: Harness) -> None:
    marker = f"cbmark{secrets.token_hex(6)}"
    r = h.run(_DAEMONS.format(marker=marker), language="bash", policy=Policy(timeout_s=2))
    expect(r.timed_out and r.killed_reason == "timeout", "timeout expected", r)
    expect(r.exit_code == 137, "killed exit code 137", r)
    expect("started" in r.stdout, "output before the kill must be kept", r)
    leftovers = host_processes_with(marker)
    expect(not leftovers, f"processes survived the call: {leftovers}")


@check("background processes die with the call even when the program exits normally")
def check_exit_kills_background(h: Harness) -> None:
    marker = f"cbmark{secrets.token_hex(6)}"
    r = h.run(f'setsid bash -c "exec -a {marker} sleep 1000" & echo ok', language="bash")
    expect(r.exit_code == 0 and r.stdout.strip() == "ok", "program should exit 0", r)
    expect(r.killed_reason is None, "not killed", r)
    expect(not host_processes_with(marker), "a background process outlived the call")


@check("a memory bomb is killed inside its limit and the result says so")
def check_memory_limit(h: Harness) -> None:
    r = h.run("b = []\nwhile True: b.append(bytearray(8 * 1024 * 1024))",
              policy=Policy(memory_mb=64, timeout_s=20))
    if r.limits_enforced_by == "rlimit":
        # Opted out of cgroups: the kernel refuses the allocation (RLIMIT_AS) instead.
        expect(r.exit_code == 1 and "MemoryError" in r.stderr, "MemoryError (rlimit)", r)
    else:
        expect(r.killed_reason == "memory", "killed_reason memory", r)
        expect(r.exit_code == 137, "exit 137", r)
    # Memory that is not the process's heap: a memfd and /dev/shm pages count too.
    r = h.run("import os\nfd = os.memfd_create('bomb')\nwhile True: os.write(fd, b'x' * 1048576)",
              policy=Policy(memory_mb=64, scratch_mb=1024, timeout_s=20))
    if r.limits_enforced_by == "rlimit":
        # RLIMIT_FSIZE stops the file at memory_mb: the write fails with EFBIG.
        expect(r.exit_code == 1 and "File too large" in r.stderr,
               "a memfd bomb must stop at the file-size limit (rlimit)", r)
    else:
        expect(r.killed_reason == "memory", "a memfd bomb must be killed for memory", r)


@check("a fork bomb stops at the pids limit and the result says so")
def check_pids_limit(h: Harness) -> None:
    r = h.run("import os\nwhile True:\n    try: os.fork()\n    except OSError: pass",
              policy=Policy(max_pids=16, timeout_s=10))
    if r.limits_enforced_by == "rlimit":
        # Opted out of cgroups: forks fail (RLIMIT_NPROC) until the wall clock ends it.
        expect(r.killed_reason == "timeout", "the contained fork bomb runs to its timeout", r)
        return
    expect(r.killed_reason == "pids", "killed_reason pids", r)
    expect("pids" in r.limits_hit, "pids in limits_hit", r)


@check("scratch space is size-capped: a disk fill hits ENOSPC")
def check_disk_fill(h: Harness) -> None:
    code = (
        "import errno, json\n"
        "res = {}\n"
        "for d in ('/work', '/tmp', '/dev/shm'):\n"
        "    n = 0\n"
        "    try:\n"
        "        with open(d + '/fill', 'wb') as f:\n"
        "            while n < 200:\n"
        "                f.write(b'0' * 1048576); f.flush(); n += 1\n"
        "        res[d] = 'no-limit'\n"
        "    except OSError as e:\n"
        "        res[d] = [e.errno, n]\n"
        "    import os; os.remove(d + '/fill')\n"
        "print(json.dumps(res))"
    )
    r = h.run(code, policy=Policy(scratch_mb=16, memory_mb=256, timeout_s=20))
    out = json_out(r)
    for d in ("/work", "/tmp", "/dev/shm"):
        value = out.get(d)
        expect(isinstance(value, list) and value[0] == 28 and value[1] <= 17,
               f"{d} should fill up at ~16 MiB with ENOSPC, got {value}", r)


# -- isolation ---------------------------------------------------------------------------


@check("nothing written in one call is visible to the next (the tutorial's secret_plan.txt)")
def check_no_persistence(h: Harness) -> None:
    nonce = secrets.token_hex(8)
    places = ["secret_plan.txt", "/tmp/secret_plan.txt", "/dev/shm/secret_plan.txt",
              "~/secret_plan.txt", "/var/tmp/secret_plan.txt", "/run/lock/secret_plan.txt",
              "~/.cache/secret_plan.txt"]
    write = (
        "import json, os\nres = {}\n"
        f"for p in {places!r}:\n"
        "    p = os.path.expanduser(p)\n"
        "    try:\n"
        "        os.makedirs(os.path.dirname(p) or '.', exist_ok=True)\n"
        f"        open(p, 'w').write({nonce!r}); res[p] = 'ok'\n"
        "    except OSError as e:\n"
        "        res[p] = e.errno\n"
        "print(json.dumps(res))"
    )
    first = json_out(h.run(write))
    expect(any(v == "ok" for v in first.values()), f"scratch must be writable: {first}")
    read = (
        "import json, os, subprocess\nres = {}\n"
        f"for p in {places!r}:\n"
        "    p = os.path.expanduser(p)\n"
        "    try:\n"
        "        res[p] = open(p).read()\n"
        "    except OSError as e:\n"
        "        res[p] = e.errno\n"
        # The nonce is rebuilt at run time so that this very code file does not contain it.
        f"grep = subprocess.run(['grep', '-rl', {nonce[::-1]!r}[::-1], '/work', '/tmp', '/dev/shm', '/var/tmp',"
        " '/run'], capture_output=True, text=True)\n"
        "res['grep'] = grep.stdout\n"
        "print(json.dumps(res))"
    )
    second = json_out(h.run(read))
    for path, value in second.items():
        if path == "grep":
            expect(value == "", f"nonce found by grep in the next call: {value}")
        else:
            expect(value != nonce, f"{path} survived into the next call")


@check("SysV shared memory does not survive into the next call")
def check_sysv_ipc_isolated(h: Harness) -> None:
    key = 0x0C0FFEE0 + secrets.randbelow(1000)
    create = (
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        f"i = libc.shmget({key}, 4096, 0o1000 | 0o666)\n"
        "print(i)"
    )
    r = h.run(create)
    expect(r.stdout.strip().lstrip("-").isdigit() and int(r.stdout) >= 0,
           "shmget should work inside", r)
    lookup = (
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        f"i = libc.shmget({key}, 0, 0)\n"
        "print(i, ctypes.get_errno())"
    )
    r = h.run(lookup)
    expect(r.stdout.split() == ["-1", "2"], "segment must be gone (ENOENT)", r)


@check("two concurrent sandboxes cannot reach each other (loopback, abstract sockets, /dev/shm)")
def check_no_cross_sandbox_channel(h: Harness) -> None:
    nonce = secrets.token_hex(8)
    port = 40000 + secrets.randbelow(20000)
    sender = f"""
import json, os, socket, time
res = {{}}
tcp = socket.socket(); tcp.bind(('127.0.0.1', {port})); tcp.listen(8); tcp.settimeout(0.1)
ab = socket.socket(socket.AF_UNIX); ab.bind('\\0cellblock-{nonce}'); ab.listen(8); ab.settimeout(0.1)
for p in ('/dev/shm/{nonce}', '/tmp/{nonce}', '/work/{nonce}'):
    open(p, 'w').write('{nonce}')
probe = socket.create_connection(('127.0.0.1', {port}), timeout=1)
res['self_connect'] = True
accepted = 0
end = time.time() + 5
while time.time() < end:
    for s in (tcp, ab):
        try:
            c, _ = s.accept(); accepted += 1; c.close()
        except OSError:
            pass
res['accepted_from_others'] = accepted - 1
print(json.dumps(res))
"""
    receiver = f"""
import json, os, socket, time
res = {{'tcp': [], 'abstract': [], 'files': []}}
end = time.time() + 2.5
while time.time() < end:
    try:
        socket.create_connection(('127.0.0.1', {port}), timeout=0.2); res['tcp'].append('connected')
    except OSError as e:
        res['tcp'].append(e.errno)
    try:
        s = socket.socket(socket.AF_UNIX); s.connect('\\0cellblock-{nonce}'); res['abstract'].append('connected')
    except OSError as e:
        res['abstract'].append(e.errno)
    for p in ('/dev/shm/{nonce}', '/tmp/{nonce}', '/work/{nonce}'):
        if os.path.exists(p): res['files'].append(p)
    time.sleep(0.1)
res = {{k: sorted(set(map(str, v))) for k, v in res.items()}}
print(json.dumps(res))
"""
    results: dict[str, ExecResult] = {}

    def run_sender() -> None:
        results["sender"] = h.run(sender)

    t = threading.Thread(target=run_sender)
    t.start()
    time.sleep(1.0)
    results["receiver"] = h.run(receiver)
    t.join()
    sent = json_out(results["sender"])
    got = json_out(results["receiver"])
    expect(sent.get("self_connect") is True, "sender's own listener must work", results["sender"])
    expect(sent.get("accepted_from_others") == 0, "sender accepted a foreign connection",
           results["sender"])
    tcp, abstract = got["tcp"], got["abstract"]
    assert isinstance(tcp, list) and isinstance(abstract, list)
    expect("connected" not in tcp and "connected" not in abstract,
           f"receiver reached the sender: {got}")
    expect(got["files"] == [], f"receiver saw the sender's files: {got}")


_HOST_BURN = """
import os, sys, time
start = time.monotonic()
end = start + float(sys.argv[1])
parent = True
for _ in range((os.cpu_count() or 1) - 1):
    if os.fork() == 0:
        parent = False
        break
hog, flipped = None, start
files = []
while time.monotonic() < end:
    # One process also takes and frees 256 MiB every 0.8 s, so that any 1 s window of
    # the watcher sees the host's available memory change by that much.
    if parent and time.monotonic() - flipped >= 0.8:
        flipped = time.monotonic()
        if hog is None:
            hog = bytearray(256 * 1024 * 1024)
            for i in range(0, len(hog), 4096):
                hog[i] = 1
            files = [open(os.devnull) for _ in range(500)]  # host-wide open-file count
        else:
            hog = None
            for f in files:
                f.close()
            files = []
if parent:
    os.wait()
"""

_WATCH_HOST = """
import json, time
def busy_jiffies():
    try:
        fields = open("/proc/stat").readline().split()[1:]
        v = [int(x) for x in fields]
        return v[0] + v[1] + v[2] + v[5] + v[6]
    except (OSError, ValueError, IndexError):
        return 0  # unreadable or empty: nothing to learn from it
def open_files():
    try:
        return int(open("/proc/sys/fs/file-nr").read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0
def available_kb():
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemAvailable:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0
time.sleep(0.5)  # the host's burn is under way
j0, m0, f0 = busy_jiffies(), available_kb(), open_files()
time.sleep(1.0)
j1, m1, f1 = busy_jiffies(), available_kb(), open_files()
print(json.dumps({"jiffies": j1 - j0, "mem_kb": abs(m1 - m0), "files": abs(f1 - f0)}))
"""


@check("host-wide /proc readers do not show the host's or other sandboxes' activity "
       "(CPU, memory, open files)")
def check_host_activity_hidden(h: Harness) -> None:
    import subprocess
    import sys

    # The host (standing in for a sibling sandbox) burns every CPU and takes 256 MiB while
    # the sandbox watches /proc/stat and /proc/meminfo: bench/covert_timing.py measured
    # 20 bit/s through /proc/stat before these were hidden.
    burner = subprocess.Popen([sys.executable, "-c", _HOST_BURN, "4"])
    try:
        r = h.run(_WATCH_HOST, policy=Policy(timeout_s=20))
    finally:
        burner.wait(timeout=30)
    expect(r.exit_code == 0, "the watcher should run", r)
    seen = json.loads(r.stdout)
    # The host burned ~100 jiffies per CPU per second of the window.
    expect(seen["jiffies"] < 30, f"host CPU activity visible in /proc/stat: {seen}", r)
    expect(seen["mem_kb"] < 64 * 1024, f"host memory use visible in /proc/meminfo: {seen}", r)
    expect(seen["files"] < 250, f"host open files visible in /proc/sys/fs/file-nr: {seen}", r)


@check("the environment is explicit: nothing leaks from the host")
def check_environment(h: Harness) -> None:
    canary = f"cellblock-canary-{secrets.token_hex(8)}"
    os.environ["CELLBLOCK_CONFORMANCE_CANARY"] = canary
    try:
        policy = Policy(timeout_s=20, env={"AGENT_MODE": "test"})
        r = h.run("import os, json\nprint(json.dumps(dict(os.environ)))", policy=policy)
    finally:
        del os.environ["CELLBLOCK_CONFORMANCE_CANARY"]
    env = json_out(r)
    expect(env.get("AGENT_MODE") == "test", "policy env must be set", r)
    expect(canary not in json.dumps(env), "host environment leaked into the sandbox", r)
    allowed = {"PATH", "HOME", "LANG", "TMPDIR", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE",
               "AGENT_MODE", "PWD", "SHLVL", "_", "LC_CTYPE", "HOSTNAME"}
    extra = set(env) - allowed
    expect(not extra, f"unexpected variables in the sandbox: {sorted(extra)}", r)


@check("the root filesystem is read-only and is not the host's")
def check_read_only_root(h: Harness) -> None:
    code = (
        "import json, os\nres = {}\n"
        "for p in ('/etc/cellblock-probe', '/usr/bin/probe', '/cellblock-probe',"
        " '/var/tmp/probe', '/root/probe'):\n"
        "    try:\n"
        "        open(p, 'w'); res[p] = 'written'\n"
        "    except OSError as e:\n"
        "        res[p] = e.errno\n"
        "print(json.dumps(res))"
    )
    r = h.run(code)
    for path, value in json_out(r).items():
        expect(value in (13, 30, 2, 1), f"{path} must not be writable (got {value})", r)
    marker = Path.cwd().resolve()
    r = h.run(f"import os\nprint(os.path.exists({str(marker)!r}))")
    if str(marker) not in ("/", "/work", "/tmp"):
        expect(r.stdout.strip() == "False", "the host's working directory is visible", r)


@check("no network: TCP, UDP, DNS, IPv6 and ping fail immediately")
def check_network_blocked(h: Harness) -> None:
    code = r"""
import json, socket, subprocess
res = {}
def attempt(name, fn):
    try:
        fn(); res[name] = 'ok'
    except socket.timeout:
        res[name] = 'timeout'
    except OSError as e:
        res[name] = e.errno if e.errno is not None else type(e).__name__
def tcp():
    s = socket.socket(); s.settimeout(5); s.connect(('8.8.8.8', 53))
def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(5)
    s.sendto(b'\x12\x34' + b'\x01\x00\x00\x01' + b'\x00' * 6, ('1.1.1.1', 53)); s.recvfrom(512)
def v6():
    s = socket.socket(socket.AF_INET6); s.settimeout(5); s.connect(('2001:4860:4860::8888', 53))
def dns():
    socket.getaddrinfo('example.com', 80)
attempt('tcp', tcp); attempt('udp', udp); attempt('ipv6', v6); attempt('dns', dns)
p = subprocess.run(['ping', '-c1', '-W2', '8.8.8.8'], capture_output=True, text=True)
res['ping'] = [p.returncode, (p.stdout + p.stderr).strip()[-120:]]
t = subprocess.run(['bash', '-c', 'exec 3<>/dev/tcp/8.8.8.8/53'], capture_output=True, text=True)
res['devtcp'] = [t.returncode, t.stderr.strip()[-120:]]
print(json.dumps(res))
"""
    r = h.run(code)
    res = json_out(r)
    unreachable = {101, 113, 99, 1, 13, 97}  # ENETUNREACH EHOSTUNREACH EADDRNOTAVAIL EPERM EACCES
    for name in ("tcp", "udp", "ipv6"):
        expect(res[name] in unreachable,
               f"{name} must fail at once with 'unreachable', got {res[name]!r}", r)
    expect(res["dns"] not in ("ok", "timeout"), f"DNS must fail at once, got {res['dns']!r}", r)
    ping = res["ping"]
    assert isinstance(ping, list)
    expect(ping[0] != 0 and "1 received" not in ping[1], f"ping must fail: {ping}", r)
    expect("100% packet loss" not in ping[1] or "unreachable" in ping[1].lower(),
           f"ping must fail at once, not time out: {ping}", r)
    devtcp = res["devtcp"]
    assert isinstance(devtcp, list)
    expect(devtcp[0] != 0, f"/dev/tcp must fail: {devtcp}", r)


@check("only the sandbox's own processes are visible; identity is neutral")
def check_process_and_identity(h: Harness) -> None:
    # NO_NEW_PRIVS and the effective capabilities are read with prctl(2) and capget(2):
    # not every kernel (gVisor's) lists them in /proc/self/status.
    code = (
        "import ctypes, json, os, socket\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "nnp = libc.prctl(39, 0, 0, 0, 0)\n"
        "hdr = (ctypes.c_uint32 * 2)(0x20080522, 0)\n"
        "data = (ctypes.c_uint32 * 6)()\n"
        "rc = libc.capget(hdr, data)\n"
        "capeff = (data[3] << 32 | data[0]) if rc == 0 else -1\n"
        "pids = [p for p in os.listdir('/proc') if p.isdigit()]\n"
        "res = {'pids': len(pids), 'uid': os.getuid(), 'hostname': socket.gethostname(),\n"
        "       'nnp': nnp, 'capeff': capeff, 'fds': sorted(os.listdir('/proc/self/fd'))}\n"
        "try:\n"
        "    socket.sethostname('evil'); res['sethostname'] = 'ok'\n"
        "except OSError as e:\n"
        "    res['sethostname'] = e.errno\n"
        "print(json.dumps(res))"
    )
    r = h.run(code)
    res = json_out(r)
    expect(isinstance(res["pids"], int) and res["pids"] <= 8, f"too many pids visible: {res}", r)
    expect(res["uid"] != 0, "must not run as root inside", r)
    expect(res["hostname"] == "sandbox", f"hostname {res['hostname']!r}", r)
    expect(res["nnp"] == 1, "NoNewPrivs must be 1", r)
    expect(res["capeff"] == 0, "the effective capability set must be empty", r)
    expect(res["sethostname"] in (1, 13), "sethostname must be refused", r)
    fds = res["fds"]
    assert isinstance(fds, list)
    expect(set(fds) <= {"0", "1", "2", "3"}, f"inherited file descriptors: {fds}", r)


_SYSCALLS = r"""
import ctypes, json, platform
libc = ctypes.CDLL(None, use_errno=True)
nr = {
 'x86_64': dict(ptrace=101, mount=165, umount2=166, pivot_root=155, unshare=272, setns=308,
                keyctl=250, add_key=248, bpf=321, perf_event_open=298, userfaultfd=323,
                io_uring_setup=425, process_vm_writev=311, clock_settime=227),
 'aarch64': dict(ptrace=117, mount=40, umount2=39, pivot_root=41, unshare=97, setns=268,
                 keyctl=219, add_key=217, bpf=280, perf_event_open=241, userfaultfd=282,
                 io_uring_setup=425, process_vm_writev=271, clock_settime=112),
}[platform.machine()]
args = dict(ptrace=(0, 0, 0, 0), mount=(b'none', b'/tmp', b'tmpfs', 0, 0), umount2=(b'/proc', 2),
            pivot_root=(b'/tmp', b'/tmp'), unshare=(0x10000000,), setns=(0, 0),
            keyctl=(0, -3 & 0xffffffff, 1), add_key=(b'user', b'k', b'v', 1, -3 & 0xffffffff),
            bpf=(5, 0, 0), perf_event_open=(0, 0, -1, -1, 0), userfaultfd=(0,),
            io_uring_setup=(1, 0), process_vm_writev=(1, 0, 0, 0, 0, 0),
            clock_settime=(0, 0))
res = {}
for name, n in nr.items():
    a = [ctypes.c_char_p(x) if isinstance(x, bytes) else ctypes.c_long(x) for x in args[name]]
    rc = libc.syscall(ctypes.c_long(n), *a)
    res[name] = 0 if rc >= 0 else ctypes.get_errno()
import fcntl, os, socket, termios
try:
    fcntl.ioctl(1, termios.TIOCSTI, b'x'); res['tiocsti'] = 0
except OSError as e:
    res['tiocsti'] = e.errno
try:
    os.open('/dev/tty', os.O_RDWR); res['controlling_tty'] = 0
except OSError as e:
    res['controlling_tty'] = e.errno
for name, fam, typ, proto in (('af_packet', 17, 3, 0), ('raw_icmp', 2, 3, 1), ('raw_v6', 10, 3, 58)):
    try:
        socket.socket(fam, typ, proto); res[name] = 0
    except OSError as e:
        res[name] = e.errno
print(json.dumps(res))
"""


@check("dangerous syscalls are refused: ptrace, mount, namespaces, keyrings, bpf, perf, "
       "userfaultfd, io_uring, raw and packet sockets")
def check_syscalls_denied(h: Harness) -> None:
    r = h.run(_SYSCALLS)
    res = json_out(r)
    # EPERM / ENOSYS from the filter; EACCES / EAFNOSUPPORT / EINVAL from a kernel
    # (gVisor) that does not implement the call at all.
    # ENOTTY, ENXIO (Linux) and EIO (gVisor): there is no controlling terminal to open.
    refused = {1, 38, 13, 97, 22, 25, 6, 5}
    bad = {name: err for name, err in res.items() if err not in refused}
    expect(not bad, f"syscalls not refused (0 means it succeeded): {bad}", r)


@check("no host sockets: docker, containerd, D-Bus, SSH or GPG agents")
def check_no_host_sockets(h: Harness) -> None:
    code = (
        "import glob, json, os, stat\n"
        "found = []\n"
        "for p in ['/var/run/docker.sock', '/run/docker.sock', '/run/containerd/containerd.sock',\n"
        "          '/run/dbus/system_bus_socket', '/var/run/dbus/system_bus_socket']"
        " + glob.glob('/run/user/*/*') + glob.glob('/tmp/ssh-*/*') + glob.glob('/run/*.sock'):\n"
        "    if os.path.exists(p): found.append(p)\n"
        "env = [k for k in os.environ if k in ('SSH_AUTH_SOCK', 'GPG_AGENT_INFO', 'DOCKER_HOST',"
        " 'DBUS_SESSION_BUS_ADDRESS')]\n"
        "print(json.dumps({'found': found, 'env': env}))"
    )
    r = h.run(code)
    out = json_out(r)
    expect(out == {"found": [], "env": []}, f"host sockets reachable: {out}", r)


@check("host details never reach the model: paths, host name, user names")
def check_host_details_redacted(h: Harness) -> None:
    code = (
        "import sys\n"
        "sys.stderr.write(open('/proc/self/mountinfo').read())\n"
        "print(open('/proc/self/mountinfo').read())"
    )
    r = h.run(code)
    hostname = socket.gethostname()
    secrets_to_hide = [str(Path.home()), str(Path.cwd())]
    if len(hostname) >= 3 and hostname not in ("sandbox", "localhost"):
        secrets_to_hide.append(hostname)
    from cellblock.images.store import cellblock_home

    secrets_to_hide.append(str(cellblock_home()))
    for secret in secrets_to_hide:
        if secret in ("/", "/root", "/work", "/tmp"):
            continue
        # A host path counts only as a whole path: the host's "/work/main" is not leaked
        # by the sandbox's own "/work/main.py".
        pattern = re.compile(re.escape(secret) + r"(?![\w.-])")
        expect(not pattern.search(r.stdout) and not pattern.search(r.stderr),
               f"host detail {secret!r} reached the model", r)


def run_checks(
    backend: str,
    options: BackendOptions | None = None,
    only: list[str] | None = None,
    allow_missing: frozenset[Protection] = frozenset(),
) -> Iterator[CheckOutcome]:
    """Run the suite (or the named checks) against ``backend``; yields one outcome each.
    ``allow_missing``: protections the policies opt out of (see :class:`Harness`)."""
    harness = Harness(backend, options, allow_missing)
    try:
        for item in CHECKS:
            if only and item.name not in only:
                continue
            start = time.monotonic()
            try:
                item.func(harness)
            except CheckFailed as exc:
                yield CheckOutcome(item.name, False, str(exc), time.monotonic() - start)
            except Exception as exc:  # an infrastructure error is a failure with evidence
                detail = exc.operator_message() if isinstance(exc, CellblockError) else repr(exc)
                yield CheckOutcome(item.name, False, f"{type(exc).__name__}: {detail}",
                                   time.monotonic() - start)
            else:
                yield CheckOutcome(item.name, True, item.description, time.monotonic() - start)
    finally:
        harness.close()
