"""200 calls with timeouts, cancellations and a SIGKILLed client: nothing is left behind.

The issue's acceptance check: after the run and at most one ``cellblock gc``, ``docker
ps -a`` shows no cellblock container of ours.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from typing import Any

import pytest

from cellblock.backends.docker import DockerOptions
from cellblock.backends.docker.gc import reap
from cellblock.policy import Policy
from cellblock.sandbox import Sandbox
from tests.backends.docker.conftest import own_containers

pytestmark = pytest.mark.integration

CALLS = 200

_CLIENT = textwrap.dedent("""
    import sys
    from cellblock.sandbox import Sandbox
    from cellblock.policy import Policy
    from cellblock.backends.docker import DockerOptions
    sb = Sandbox(sys.argv[1], Policy(timeout_s=120), options=DockerOptions(pool_size=2))
    print('ready', flush=True)
    sb.run('import time\\ntime.sleep(120)')
""")


def _start_doomed_client(backend: str, docker_api: Any) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-c", _CLIENT, backend], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == b"ready"
    # The call (a 120 s sleep) starts right after "ready"; give it time to be mid-call.
    # (With a started pool, pool containers run too, so "running" alone proves nothing.)
    time.sleep(3)
    if not any(c["State"] == "running" for c in own_containers(docker_api, proc.pid)):
        proc.kill()
        raise AssertionError("the doomed client's call never started")
    return proc


async def _calls(sb: Sandbox) -> dict[str, int]:
    counts = {"ok": 0, "timeout": 0, "cancelled": 0}
    sem = asyncio.Semaphore(2)

    async def one(i: int) -> None:
        async with sem:
            if i % 10 == 3:
                r = await sb.arun("while True: pass", policy=Policy(timeout_s=0.5))
                assert r.killed_reason == "timeout", r
                counts["timeout"] += 1
            elif i % 10 == 7:
                task = asyncio.ensure_future(sb.arun("import time\ntime.sleep(30)"))
                await asyncio.sleep(0.4)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                counts["cancelled"] += 1
            else:
                r = await sb.arun(f"print({i})")
                assert r.stdout == f"{i}\n", r
                counts["ok"] += 1

    await asyncio.gather(*(one(i) for i in range(CALLS)))
    return counts


def test_200_calls_leave_nothing_after_one_gc(backend_name: str, docker_api: Any) -> None:
    doomed = _start_doomed_client(backend_name, docker_api)
    try:
        with Sandbox(backend_name, Policy(timeout_s=20),
                     options=DockerOptions(pool_size=2)) as sb:
            os.kill(doomed.pid, signal.SIGKILL)  # mid-call, holding pool containers too
            doomed.wait()
            counts = asyncio.run(_calls(sb))
    finally:
        if doomed.poll() is None:
            doomed.kill()
            doomed.wait()
    assert counts == {"ok": 160, "timeout": 20, "cancelled": 20}
    assert own_containers(docker_api) == []  # our own calls: removed by close()
    # The killed client's leftovers are still there, unless a backend starting in some
    # other process on this machine reaped them already (which is the point).
    report = reap(docker_api)  # one gc
    assert not report.failed
    assert own_containers(docker_api, doomed.pid) == []
    assert own_containers(docker_api) == []
