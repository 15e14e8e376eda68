"""The tutorial's checks, as a user would want to see them.

For each backend: an agent writes secret_plan.txt and a later call looks for it; the
agent tries the network; a runaway loop meets the timeout; a fork bomb meets the pids
limit. Each panel shows the code the agent sent and exactly what it got back.

    python demo/tutorial_checks.py [--backend bwrap] [--backend docker] ...
"""

from __future__ import annotations

import argparse
import sys
import time

from rich.console import Console, Group
from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from cellblock import CellblockError, ExecResult, Policy, Sandbox

console = Console()

WRITE_PLAN = """\
import os
for path in ["secret_plan.txt", "/tmp/secret_plan.txt", "/dev/shm/secret_plan.txt",
             os.path.expanduser("~/secret_plan.txt")]:
    with open(path, "w") as f:
        f.write("meet at the usual place")
    print("wrote", path)
"""
READ_PLAN = """\
import os
for path in ["secret_plan.txt", "/tmp/secret_plan.txt", "/dev/shm/secret_plan.txt",
             os.path.expanduser("~/secret_plan.txt")]:
    try:
        print(path, "->", open(path).read())
    except OSError as e:
        print(path, "->", e.strerror)
"""
NETWORK = """\
import socket, subprocess, time
t = time.monotonic()
try:
    socket.create_connection(("8.8.8.8", 53), timeout=5)
    print("TCP 8.8.8.8:53 connected")
except OSError as e:
    print(f"TCP 8.8.8.8:53 -> {e} after {time.monotonic() - t:.3f}s")
p = subprocess.run(["ping", "-c1", "-W2", "8.8.8.8"], capture_output=True, text=True)
print("ping ->", (p.stdout + p.stderr).strip().splitlines()[-1])
try:
    socket.getaddrinfo("example.com", 443)
except OSError as e:
    print("DNS example.com ->", e)
"""
RUNAWAY = """\
import subprocess
# a child that hides in its own session and ignores SIGTERM, then spin forever
subprocess.Popen(["bash", "-c", "trap '' TERM; sleep 1000"], start_new_session=True)
print("spinning...", flush=True)
while True:
    pass
"""
FORK_BOMB = """\
import os
# every process forks forever, and shrugs off the errors
while True:
    try:
        os.fork()
    except OSError:
        pass
"""


def show(title: str, code: str, result: ExecResult, verdict: str, ok: bool) -> None:
    meta = Table.grid(padding=(0, 2))
    meta.add_row("exit code", str(result.exit_code))
    meta.add_row("killed", str(result.killed_reason))
    meta.add_row("duration", f"{result.duration_ms:.0f} ms")
    meta.add_row("limits", result.limits_enforced_by)
    got = Text(result.stdout.rstrip() or "(no stdout)")
    if result.stderr.strip():
        tail = "\n".join(result.stderr.rstrip().splitlines()[-3:])
        got.append("\n[stderr] " + tail, style="dim")
    body = Group(
        Syntax(code.rstrip(), "python", theme="ansi_dark", line_numbers=False),
        Text("agent got back:", style="bold"),
        got,
        meta,
        Text(("PASS  " if ok else "FAIL  ") + verdict, style="bold green" if ok else "bold red"),
    )
    console.print(Panel(body, title=title, border_style="green" if ok else "red"))


def demo(backend: str) -> bool:
    console.rule(f"[bold]backend: {backend}")
    try:
        sandbox = Sandbox(backend, Policy(timeout_s=2, max_pids=32), agent_id="demo-agent")
    except CellblockError as exc:
        console.print(f"[yellow]skipped {backend}:[/] {exc.safe_message}"
                      + (f" (fix: {exc.hint})" if exc.hint else ""))
        return True
    results = []
    with sandbox:
        first = sandbox.run(WRITE_PLAN)
        show("1. write secret_plan.txt", WRITE_PLAN, first, "the agent could write its scratch space",
             first.exit_code == 0)
        second = sandbox.run(READ_PLAN)
        ok = "meet at the usual place" not in second.stdout and second.stdout.count("No such file") == 4
        show("2. next call: read secret_plan.txt", READ_PLAN, second,
             "nothing survived the previous call", ok)
        results.append(first.exit_code == 0 and ok)

        net = sandbox.run(NETWORK)
        out = net.stdout.lower()
        ok = "connected" not in out and ("unreachable" in out or "no route" in out)
        show("3. reach the network", NETWORK, net, "every attempt failed at once: no route", ok)
        results.append(ok)

        t = time.monotonic()
        loop = sandbox.run(RUNAWAY)
        ok = loop.killed_reason == "timeout"
        show("4. runaway loop with a hidden child", RUNAWAY, loop,
             f"killed at the 2 s timeout with its whole tree ({time.monotonic() - t:.1f} s wall)", ok)
        results.append(ok)

        bomb = sandbox.run(FORK_BOMB)
        ok = bomb.killed_reason == "pids"
        show("5. fork bomb", FORK_BOMB, bomb, "stopped at the 32-process limit; the host never noticed",
             ok)
        results.append(ok)
    return all(results)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--backend", action="append",
                        help="backend(s) to show (default: bwrap, docker, gvisor)")
    args = parser.parse_args()
    backends = args.backend or ["bwrap", "docker", "gvisor"]
    ok = all([demo(b) for b in backends])
    console.rule()
    console.print("[bold green]all checks passed[/]" if ok else "[bold red]some checks failed[/]")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
