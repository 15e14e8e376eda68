#!/usr/bin/env python3
"""Capacity of the CPU-contention timing channel between two concurrent sandboxes.

The attack catalogue (shared/REDTEAM.md, case 12) asks for this to be measured, not
closed: on shared hardware nobody can make it zero. Sandbox A (the sender) and sandbox B
(the receiver) run at the same time on the same backend. They share nothing but the
host's CPUs and its wall clock (there is no time namespace), so they can agree on a
schedule in advance: slot ``i`` starts at ``T0 + i * slot``. For each bit of a fresh
random nonce, A keeps every CPU busy during the slot (a 1) or sleeps (a 0); B counts
how many iterations of a tight loop it completes in each slot, and a slot with fewer
iterations than the median decodes as a 1.

For each backend and slot length it reports the bit error rate and the capacity of
the resulting binary symmetric channel, ``(1 - H(ber)) / slot`` bits/s. The same-run
baseline is a control with the sender present but always idle (every bit 0): whatever
the receiver "decodes" there is noise, so its capacity is what the decoder alone makes
of nothing (close to 0 bits/s if the method is honest).

Usage: ``.venv/bin/python bench/covert_timing.py [--backend bwrap --backend docker ...]
[--bits 64] [--slot-ms 50 --slot-ms 200]``. Runs on this machine only; no network.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import secrets
import statistics
import sys
import threading
import time

from cellblock import Policy, Sandbox

SENDER = """
import os, time
T0, SLOT, BITS, MODE = {t0!r}, {slot!r}, {bits!r}, {mode!r}
workers = max(1, os.cpu_count() or 1)
for _ in range(workers - 1):
    if os.fork() == 0:
        break
src = bytearray(32 * 1024 * 1024) if MODE == "membw" else None
for i, bit in enumerate(BITS):
    start, end = T0 + i * SLOT, T0 + (i + 1) * SLOT
    now = time.time()
    if now < start:
        time.sleep(start - now)
    if bit == "1":
        while time.time() < end:
            if src is not None:
                bytes(src)  # stream 32 MiB through the memory bus and the shared cache
    else:
        rest = end - time.time()
        if rest > 0:
            time.sleep(rest)
"""

# How the receiver observes the sender. "cpu": iterations of a tight loop per slot (CPU
# contention); "membw": copies of a 4 MiB buffer per slot (memory-bandwidth and cache
# contention); "procstat": host-wide busy CPU time per slot from /proc/stat (a host-global
# reader, REDTEAM case 15: shown by bwrap and runc, virtualised by gVisor).
RECEIVER = """
import time
T0, SLOT, N, MODE = {t0!r}, {slot!r}, {n!r}, {mode!r}

def busy_jiffies():
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return v[0] + v[1] + v[2] + v[5] + v[6]  # user nice system irq softirq
    except (OSError, ValueError, IndexError):
        return 0  # masked (empty) or unreadable: nothing to observe

buf = bytearray(4 * 1024 * 1024)
counts = []
now = time.time()
if now < T0:
    time.sleep(T0 - now)
for i in range(N):
    end = T0 + (i + 1) * SLOT
    n = 0
    if MODE == "procstat":
        before = busy_jiffies()
        rest = end - time.time()
        if rest > 0:
            time.sleep(rest)
        n = -(busy_jiffies() - before)  # more host activity reads as less for us
    else:
        while time.time() < end:
            if MODE == "membw":
                bytes(buf)
            n += 1
    counts.append(n)
print(" ".join(map(str, counts)))
"""

MODES = ("cpu", "membw", "procstat")


def entropy(p: float) -> float:
    if p <= 0 or p >= 1:
        return 0.0
    return -p * math.log2(p) - (1 - p) * math.log2(1 - p)


def decode(counts: list[int]) -> str:
    """A slot where the receiver got less CPU than the median reads as a 1."""
    median = statistics.median(counts)
    return "".join("1" if c < median else "0" for c in counts)


def transmit(sb: Sandbox, bits: str, slot: float, mode: str) -> tuple[str, list[int]]:
    """Run sender and receiver at the same time; return what the receiver decoded."""
    t0 = time.time() + 2.0  # both sandboxes are up long before the first slot
    policy = Policy(timeout_s=min(600.0, 10 + len(bits) * slot), max_pids=64, memory_mb=512)
    results: dict[str, object] = {}

    def send() -> None:
        results["sender"] = sb.run(SENDER.format(t0=t0, slot=slot, bits=bits, mode=mode),
                                   policy=policy)

    sender = threading.Thread(target=send)
    sender.start()
    received = sb.run(RECEIVER.format(t0=t0, slot=slot, n=len(bits), mode=mode), policy=policy)
    sender.join()
    if received.exit_code != 0:
        raise SystemExit(f"receiver failed: {received.stderr[-500:]}")
    counts = [int(x) for x in received.stdout.split()]
    return decode(counts), counts


def measure(backend: str, nbits: int, slot_ms: float, mode: str) -> dict[str, object]:
    slot = slot_ms / 1000
    with Sandbox(backend, Policy(timeout_s=30), recorder=None) as sb:
        sb.run("print('warm')")
        nonce = "".join(secrets.choice("01") for _ in range(nbits))
        got, counts = transmit(sb, nonce, slot, mode)
        control, _ = transmit(sb, "0" * nbits, slot, mode)
    ber = sum(a != b for a, b in zip(nonce, got, strict=True)) / nbits
    # The control sends nothing (all zeros): score what the receiver decodes from noise
    # against the same nonce. A sound method gives ~0.5 here, so ~0 bits/s.
    ber_control = sum(a != b for a, b in zip(nonce, control, strict=True)) / nbits
    rate = 1 / slot
    return {
        "backend": backend, "mode": mode, "slot_ms": slot_ms, "bits": nbits,
        "ber": round(ber, 3),
        "capacity_bits_s": round(rate * (1 - entropy(ber)), 2),
        "control_ber": round(ber_control, 3),
        "control_capacity_bits_s": round(rate * (1 - entropy(ber_control)), 2),
        "count_spread": [min(counts), int(statistics.median(counts)), max(counts)],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--backend", action="append", default=None)
    ap.add_argument("--bits", type=int, default=64)
    ap.add_argument("--slot-ms", type=float, action="append", default=None)
    ap.add_argument("--mode", action="append", choices=MODES, default=None)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    backends = args.backend or ["bwrap", "docker", "gvisor"]
    slots = args.slot_ms or [20.0, 50.0, 200.0]
    modes = args.mode or list(MODES)
    rows = [measure(b, args.bits, s, m) for b in backends for m in modes for s in slots]
    if args.json:
        print(json.dumps(rows))
        return
    print(f"cores: {os.cpu_count()}, python {sys.version.split()[0]}, {args.bits} bits per run")
    print(f"{'backend':8} {'receiver':9} {'slot':>7} {'BER':>6} {'capacity':>13} "
          f"{'control BER':>12} {'control cap.':>13}")
    for r in rows:
        print(f"{r['backend']:8} {r['mode']:9} {r['slot_ms']:>5.0f}ms {r['ber']:>6.3f} "
              f"{r['capacity_bits_s']:>8.2f} bit/s {r['control_ber']:>12.3f} "
              f"{r['control_capacity_bits_s']:>8.2f} bit/s")


if __name__ == "__main__":
    main()
