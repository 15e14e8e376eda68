#!/usr/bin/env python3
"""Throughput cost of ``BwrapOptions(hide_host_proc=True)``: 4 callers share one bwrap
``Sandbox`` and run ``print(1)`` 200 times, alternating rounds with the host-wide /proc
files hidden (the default) and shown, so both series see the same machine load.

Usage: ``.venv/bin/python bench/bwrap_proc_views.py [--rounds 4] [--calls 200]``.
"""

from __future__ import annotations

import argparse
import statistics

from cellblock import Policy, Sandbox
from cellblock.backends.bwrap import BwrapOptions
from cellblock.bench import measure_throughput


def throughput(hide: bool, calls: int, callers: int) -> float:
    with Sandbox("bwrap", Policy(), options=BwrapOptions(hide_host_proc=hide),
                 recorder=None) as sb:
        for _ in range(8):  # fill the pool
            sb.run("print(1)")
        calls_per_s, errors = measure_throughput(sb, calls, callers)
    if errors:
        raise SystemExit(f"{errors} calls failed")
    return calls_per_s


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--callers", type=int, default=4)
    args = ap.parse_args()
    series: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(args.rounds):
        for hide in (False, True):
            series[hide].append(throughput(hide, args.calls, args.callers))
    for hide, values in series.items():
        label = "hide_host_proc=True " if hide else "hide_host_proc=False"
        print(f"{label}: {', '.join(f'{v:.1f}' for v in values)} calls/s "
              f"(median {statistics.median(values):.1f})")


if __name__ == "__main__":
    main()
