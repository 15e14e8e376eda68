"""Integration tests of the Docker (runc) and gVisor (runsc) backends on a real daemon.

Each test runs on both backends. The generic guarantees are also checked by the shared
conformance suite; these tests cover what is specific to the engine: the pool, the
bootstrap, engine errors, leftovers and limits as Docker reports them.
"""

from __future__ import annotations

import asyncio
import os
import platform
import signal
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from typing import Any

import pytest

from cellblock.backends.base import CancelToken, ExecRequest
from cellblock.backends.docker import DockerBackend, DockerOptions, GVisorBackend
from cellblock.backends.docker.engine import engine_errors
from cellblock.backends.docker.gc import reap
from cellblock.errors import ImageNotFound, SandboxUnavailable
from cellblock.policy import Policy
from cellblock.sandbox import Sandbox
from tests.backends.docker.conftest import own_containers

pytestmark = pytest.mark.integration


def sandbox(name: str, policy: Policy | None = None, **opts: Any) -> Sandbox:
    opts.setdefault("pool_size", 1)
    return Sandbox(name, policy or Policy(timeout_s=20), options=DockerOptions(**opts))


def calls_running(sb: Sandbox, docker_api: Any) -> list[str]:
    """Our running containers that are not waiting in the pool (i.e. serving a call)."""
    pooled = set(sb._backend._pool.pooled())  # type: ignore[attr-defined]
    return [c["Id"] for c in own_containers(docker_api)
            if c["State"] == "running" and c["Id"] not in pooled]


def test_identity_env_and_privileges(backend_name: str) -> None:
    code = textwrap.dedent("""
        import ctypes, os, socket
        status = dict(l.split(':', 1) for l in open('/proc/self/status').read().splitlines())
        PR_GET_NO_NEW_PRIVS = 39  # /proc/self/status of gVisor 2022 has no NoNewPrivs line
        print(os.getuid(), os.getgid(), os.getgroups())
        print(os.getcwd(), socket.gethostname())
        print(sorted(os.environ.items()))
        print(status['CapEff'].strip(), status['CapPrm'].strip(), status['CapBnd'].strip())
        print(ctypes.CDLL(None, use_errno=True).prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0))
    """)
    with sandbox(backend_name, Policy(timeout_s=20, env={"MODE": "test"})) as sb:
        r = sb.run(code)
    assert r.ok, r
    lines = r.stdout.splitlines()
    assert lines[0] == "1000 1000 []"
    assert lines[1] == "/work sandbox"
    assert lines[2] == str(sorted({
        "PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/work", "LANG": "C.UTF-8",
        "TMPDIR": "/tmp", "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1",
        "MODE": "test",
    }.items()))
    assert lines[3] == "0000000000000000 0000000000000000 0000000000000000"
    assert lines[4] == "1"
    assert r.limits_enforced_by == "engine"


def test_code_and_inputs_read_only_cwd_writable_stdin(backend_name: str) -> None:
    code = textwrap.dedent("""
        import os, sys
        for path in ('/work/main.py', '/work/data.txt'):
            for attempt in (lambda: open(path, 'a'), lambda: os.unlink(path),
                            lambda: os.rename(path, '/work/moved')):
                try:
                    attempt()
                    print('WRITABLE', path)
                except OSError as exc:
                    print('denied', exc.errno)
        open('/work/out.txt', 'w').write('ok')
        print(open('data.txt').read(), open('/work/out.txt').read(), sys.stdin.read())
    """)
    with sandbox(backend_name) as sb:
        r = sb.run(code, files={"data.txt": b"DATA"}, stdin=b"IN")
    assert r.ok, r
    assert "WRITABLE" not in r.stdout
    assert r.stdout.count("denied") == 6
    assert r.stdout.splitlines()[-1] == "DATA ok IN"


def test_bash_and_root_filesystem_read_only(backend_name: str) -> None:
    code = "for d in / /etc /usr /var/tmp /run /home; do touch $d/x 2>/dev/null && echo WROTE $d; done; echo done"
    with sandbox(backend_name) as sb:
        r = sb.run(code, language="bash")
    assert r.ok, r
    assert r.stdout == "done\n"


def test_nothing_persists_between_calls(backend_name: str) -> None:
    nonce = uuid.uuid4().hex
    write = textwrap.dedent(f"""
        import os
        for d in ('/work', '/tmp', '/dev/shm', os.path.expanduser('~')):
            open(os.path.join(d, 'drop'), 'w').write('{nonce}')
        print('written')
    """)
    read = textwrap.dedent("""
        import os
        found = [d for d in ('/work', '/tmp', '/dev/shm') if os.path.exists(os.path.join(d, 'drop'))]
        print(found)
    """)
    with sandbox(backend_name) as sb:
        assert sb.run(write).stdout == "written\n"
        r = sb.run(read)
    assert r.stdout == "[]\n"
    assert nonce not in r.stdout


def test_network_blocked(backend_name: str) -> None:
    # A listener on the host's loopback: the sandbox must not reach it (own netns).
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    code = textwrap.dedent(f"""
        import socket
        for addr in (('127.0.0.1', {port}), ('1.1.1.1', 53)):
            s = socket.socket()
            s.settimeout(2)
            try:
                s.connect(addr)
                print('CONNECTED', addr)
            except OSError as exc:
                print('blocked')
        try:
            socket.getaddrinfo('example.com', 80)
            print('RESOLVED')
        except OSError:
            print('no resolver')
        print(sorted(i[1] for i in socket.if_nameindex()))
    """)
    try:
        with sandbox(backend_name) as sb:
            r = sb.run(code)
    finally:
        server.close()
    assert r.ok, r
    assert "CONNECTED" not in r.stdout and "RESOLVED" not in r.stdout
    assert r.stdout.splitlines()[-1] == "['lo']"


def test_timeout_kills_setsid_children(backend_name: str, docker_api: Any) -> None:
    marker = f"cb{uuid.uuid4().hex[:12]}"
    code = f"setsid sh -c 'exec -a {marker} sleep 300' & nohup sh -c 'sleep 301' >/dev/null 2>&1 & while :; do :; done"
    with sandbox(backend_name, Policy(timeout_s=1.5)) as sb:
        r = sb.run(code, language="bash")
        assert r.timed_out and r.killed_reason == "timeout"
        assert r.exit_code == 137
        assert "timeout" in r.limits_hit
        # Nothing of the call runs any more (only pool containers, where no code has run,
        # and the dead container on its way out, may remain until close()).
        assert not calls_running(sb, docker_api)
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True)
    assert marker not in ps.stdout


def test_memory_limit_kills(backend_name: str) -> None:
    code = "x = []\nwhile True:\n    x.append(bytearray(8 * 1024 * 1024))\n"
    with sandbox(backend_name, Policy(timeout_s=30, memory_mb=64)) as sb:
        r = sb.run(code)
    assert r.killed_reason == "memory", r
    assert r.exit_code == 137
    assert "memory" in r.limits_hit


def test_fork_bomb_stopped_at_the_pids_limit(backend_name: str) -> None:
    code = textwrap.dedent("""
        import os, time
        n = 0
        try:
            for _ in range(200):
                if os.fork() == 0:
                    time.sleep(30)
                    os._exit(0)
                n += 1
        except OSError:
            print('fork refused after', n, flush=True)
        time.sleep(30)
    """)
    with sandbox(backend_name, Policy(timeout_s=20, max_pids=16)) as sb:
        r = sb.run(code)
    # runc: the container's pids cgroup fires. gVisor: the sandbox kernel refuses the fork
    # (RLIMIT_NPROC) and the in-sandbox watcher reports it. Either way the sandbox is
    # stopped at once, not at the timeout.
    assert r.killed_reason == "pids", r
    assert "pids" in r.limits_hit
    assert not r.timed_out
    if "fork refused after" in r.stdout:
        forked = int(r.stdout.split()[-1])
        assert forked + 1 <= 16  # the parent plus its children, alive at once
    assert r.exit_code == 137


def test_output_flood_is_capped(backend_name: str) -> None:
    code = "import sys\nwhile True:\n    sys.stdout.write('A' * 65536)\n"
    with sandbox(backend_name, Policy(timeout_s=30, output_limit_bytes=10_000)) as sb:
        r = sb.run(code)
    assert r.killed_reason == "output", r
    assert r.truncated
    assert len(r.stdout) <= 10_000
    assert r.stdout.startswith("AAAA")


def test_scratch_is_size_capped(backend_name: str) -> None:
    code = textwrap.dedent("""
        import errno
        for d in ('/work', '/tmp', '/dev/shm'):
            try:
                with open(d + '/fill', 'wb') as f:
                    for _ in range(12):
                        f.write(b'x' * (1024 * 1024))
                        f.flush()
                print('FILLED', d)
            except OSError as exc:
                print(d, exc.errno == errno.ENOSPC)
    """)
    with sandbox(backend_name, Policy(timeout_s=20, scratch_mb=8, memory_mb=256)) as sb:
        r = sb.run(code)
    assert r.ok, r
    assert r.stdout.split("\n")[:3] == ["/work True", "/tmp True", "/dev/shm True"]


def test_cancel_through_arun_removes_the_container(backend_name: str, docker_api: Any) -> None:
    async def scenario(sb: Sandbox) -> None:
        task = asyncio.create_task(sb.arun("import time\ntime.sleep(60)"))
        for _ in range(200):  # until the call's container runs
            if calls_running(sb, docker_api):
                break
            await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    with sandbox(backend_name, Policy(timeout_s=60)) as sb:
        asyncio.run(scenario(sb))
        assert not calls_running(sb, docker_api)


def test_cancel_token_reports_cancelled(backend_name: str) -> None:
    cls = DockerBackend if backend_name == "docker" else GVisorBackend
    backend = cls(DockerOptions(pool_size=0))
    try:
        cancel = CancelToken()
        req = ExecRequest(run_id="c", language="python", code="import time\ntime.sleep(60)",
                          policy=Policy(timeout_s=60))
        timer = threading_timer(1.0, cancel.cancel)
        out = backend.execute(req, cancel)
        timer.join()
    finally:
        backend.close()
    assert out.killed_reason == "cancelled"
    assert out.exit_code == 137


def threading_timer(delay: float, fn: Any) -> Any:
    import threading

    t = threading.Timer(delay, fn)
    t.start()
    return t


def test_pool_never_reuses_a_container(backend_name: str) -> None:
    cls = DockerBackend if backend_name == "docker" else GVisorBackend
    backend = cls(DockerOptions(pool_size=2))
    policy = Policy(timeout_s=20)
    try:
        backend.prepare(policy)
        ids = []
        for i in range(6):
            req = ExecRequest(run_id=str(i), language="python", code="print(1)", policy=policy)
            out = backend.execute(req, CancelToken())
            assert out.stdout == b"1\n"
            ids.append(out.host_secrets[0])
        assert len(set(ids)) == len(ids)
        assert backend._pool.handed_out <= set(ids)
        assert len(backend._pool.handed_out) >= 1  # the pool was really used
    finally:
        backend.close()


def test_concurrent_calls(backend_name: str) -> None:
    async def many(sb: Sandbox) -> list[str]:
        results = await asyncio.gather(*(sb.arun(f"print({i})") for i in range(4)))
        return [r.stdout for r in results]

    with sandbox(backend_name, pool_size=2) as sb:
        outs = asyncio.run(many(sb))
    assert outs == [f"{i}\n" for i in range(4)]


def test_gvisor_has_its_own_kernel(backend_name: str) -> None:
    with sandbox(backend_name) as sb:
        r = sb.run("import platform; print(platform.release())")
    if backend_name == "gvisor":
        assert r.stdout.strip() != platform.release()  # gVisor's own kernel answers
    else:
        assert r.stdout.strip() == platform.release()  # runc shares the host kernel


def test_missing_images_give_the_fix(docker_api: Any) -> None:
    with pytest.raises(ImageNotFound) as info:
        Sandbox("docker", options=DockerOptions(image="nosuchimage-cb"))
    assert "cellblock image build --docker" in (info.value.hint or "")
    with pytest.raises(ImageNotFound) as info:
        Sandbox("docker", options=DockerOptions(image="python:3.99-nonexistent"))
    assert "docker pull python:3.99-nonexistent" in (info.value.hint or "")
    assert "nothing is pulled" in (info.value.hint or "")


def test_daemon_errors_never_reach_the_model(docker_api: Any) -> None:
    bogus = "0123456789ab" * 5 + "cdef"
    with pytest.raises(SandboxUnavailable) as info, engine_errors("inspect"):
        docker_api.inspect_container(bogus)
    assert bogus not in str(info.value) and bogus[:12] not in info.value.safe_message
    assert info.value.detail is not None and bogus in info.value.detail

    with pytest.raises(SandboxUnavailable) as info:
        Sandbox("docker", options=DockerOptions(docker_host="unix:///nonexistent/docker.sock"))
    assert "nonexistent" not in str(info.value)


def test_killed_client_leftovers_are_reaped(docker_api: Any) -> None:
    script = textwrap.dedent("""
        import sys
        from cellblock.sandbox import Sandbox
        from cellblock.policy import Policy
        from cellblock.backends.docker import DockerOptions
        sb = Sandbox(sys.argv[1], Policy(timeout_s=120), options=DockerOptions(pool_size=2))
        print('ready', flush=True)
        sb.run('import time\\ntime.sleep(120)')
    """)
    for name in ("docker", "gvisor"):
        proc = subprocess.Popen([sys.executable, "-c", script, name], stdout=subprocess.PIPE)
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == b"ready"
            time.sleep(3)  # the call starts right after "ready": now it is mid-call
            assert any(c["State"] == "running" for c in own_containers(docker_api, proc.pid))
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        assert own_containers(docker_api, proc.pid)  # leftovers exist: the owner died mid-call
        reap(docker_api)
        assert own_containers(docker_api, proc.pid) == []


def test_gc_cli_reaps(docker_api: Any) -> None:
    from click.testing import CliRunner

    from cellblock.cli.main import cli

    # A leftover from a process that no longer exists.
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    dead_pid = proc.stdout.strip()
    cid = docker_api.create_container(
        "cellblock/default:latest", command=["true"],
        labels={"cellblock.managed": "1", "cellblock.owner_pid": dead_pid},
    )["Id"]
    result = CliRunner().invoke(cli, ["gc", "--json"])
    assert result.exit_code == 0, result.output
    remaining = [c["Id"] for c in docker_api.containers(all=True, filters={"id": cid})]
    assert remaining == []


def test_container_id_and_host_paths_redacted(backend_name: str) -> None:
    cls = DockerBackend if backend_name == "docker" else GVisorBackend
    code = "cat /proc/self/mountinfo /proc/self/cgroup; hostname; echo; cat /etc/hostname"
    with Sandbox(cls(DockerOptions(pool_size=0))) as sb:
        r = sb.run(code, language="bash")
    assert r.ok, r
    assert "/var/lib/docker" not in r.stdout
    import re

    assert not re.search(r"\b[0-9a-f]{64}\b", r.stdout)
    assert not re.search(r"\b[0-9a-f]{12}\b", r.stdout)


def test_user_named_local_image(docker_api: Any) -> None:
    # Any image present locally can be used by reference; a tag of the default one
    # stands in for e.g. python:3.12-slim (nothing can be pulled here).
    ref = f"cbtest/userimage:{uuid.uuid4().hex[:8]}"
    repo, tag = ref.split(":")
    docker_api.tag("cellblock/default:latest", repo, tag)
    try:
        with Sandbox("docker", options=DockerOptions(image=ref, pool_size=0)) as sb:
            r = sb.run("print('from', 'user image')")
        assert r.stdout == "from user image\n"
    finally:
        docker_api.remove_image(ref)


def test_dead_pool_container_is_replaced(backend_name: str, docker_api: Any) -> None:
    cls = DockerBackend if backend_name == "docker" else GVisorBackend
    backend = cls(DockerOptions(pool_size=1, pool_started=True))
    policy = Policy(timeout_s=20)
    try:
        backend.prepare(policy)
        for _ in range(300):
            pooled = backend._pool.pooled()
            if pooled:
                break
            time.sleep(0.05)
        assert pooled
        docker_api.kill(pooled[0])  # dies while it waits in the pool
        req = ExecRequest(run_id="r", language="python", code="print(1)", policy=policy)
        out = backend.execute(req, CancelToken())
        assert out.stdout == b"1\n"
        assert out.host_secrets[0] != pooled[0]
    finally:
        backend.close()
