"""Per-call benchmarks with a baseline measured in the same run.

The machine is noisy, so absolute numbers mean little; what we report is our figure next
to a baseline measured interleaved with it, in the same process, on the same load:

* bwrap: the *floor*, the same interpreter in the same root filesystem with no sandbox
  (``chroot ROOTFS python3 FILE``; without root, the image's interpreter cannot be
  entered, and the host's ``python3`` is used and labelled as such).
* docker / gvisor: the tutorial's design, ``docker run --rm --network none -v TMP:/app:ro
  IMAGE python3 /app/script.py`` through a subprocess, on the same image.

Throughput is measured with several concurrent callers sharing one :class:`Sandbox`.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import threading
import time
from collections.abc import Callable

from pydantic import BaseModel

from cellblock.backends.base import BackendOptions
from cellblock.errors import CellblockError, SandboxUnavailable
from cellblock.policy import Policy
from cellblock.sandbox import Sandbox

__all__ = ["BenchReport", "Series", "run_bench"]

CODE = "print(1)"


class Series(BaseModel):
    """Per-call wall times of one series, in milliseconds."""

    label: str
    n: int
    p50_ms: float
    p95_ms: float
    mean_ms: float
    min_ms: float

    @classmethod
    def of(cls, label: str, samples: list[float]) -> Series:
        ordered = sorted(samples)
        return cls(
            label=label,
            n=len(samples),
            p50_ms=round(statistics.median(ordered), 3),
            p95_ms=round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))], 3),
            mean_ms=round(statistics.fmean(ordered), 3),
            min_ms=round(ordered[0], 3),
        )


class BenchReport(BaseModel):
    backend: str
    code: str
    sandbox: Series
    baseline: Series
    overhead_p50_ms: float
    """sandbox p50 minus baseline p50."""
    overhead_p95_ms: float
    ratio_p50: float
    """sandbox p50 divided by baseline p50."""
    concurrency: int
    calls_per_s: float
    """Throughput with ``concurrency`` callers sharing one Sandbox."""
    failures: int
    notes: list[str]


def _time(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


def _floor_runner(options: BackendOptions | None) -> tuple[str, Callable[[], object]]:
    """The no-sandbox baseline for the bwrap backend."""
    from cellblock.backends.bwrap import BwrapOptions
    from cellblock.images.store import require_rootfs

    opts = options if isinstance(options, BwrapOptions) else BwrapOptions()
    rootfs = opts.rootfs or require_rootfs(opts.image)
    if os.geteuid() == 0 and shutil.which("chroot"):
        cmd = ["chroot", str(rootfs), "python3", "-c", CODE]
        return "floor: chroot IMAGE python3 (no sandbox)", lambda: subprocess.run(
            cmd, capture_output=True, check=True
        )
    cmd = ["python3", "-c", CODE]
    return "floor: host python3 (no sandbox; not root, cannot enter the image)", lambda: (
        subprocess.run(cmd, capture_output=True, check=True)
    )


def _tutorial_runner(options: BackendOptions | None) -> tuple[str, Callable[[], object]]:
    from cellblock.backends.docker import DockerOptions
    from cellblock.backends.docker.baseline import tutorial_docker_run_baseline

    opts = options if isinstance(options, DockerOptions) else DockerOptions()
    image = opts.image_reference
    return (
        "baseline: tutorial `docker run --rm --network none -v TMP:/app:ro` (runc)",
        lambda: tutorial_docker_run_baseline(image, 1),
    )


def measure_throughput(
    sandbox: Sandbox,
    n: int,
    concurrency: int,
    progress: Callable[[str, int, int], None] | None = None,
) -> tuple[float, int]:
    """``concurrency`` callers share ``sandbox`` and run :data:`CODE` ``n`` times in
    all; return (calls per second, calls that raised)."""
    done = 0
    lock = threading.Lock()
    errors: list[BaseException] = []

    def worker(count: int) -> None:
        nonlocal done
        for _ in range(count):
            try:
                sandbox.run(CODE)
            except CellblockError as exc:
                errors.append(exc)
            with lock:
                done += 1
                if progress:
                    progress("concurrent", done, n)

    per = [n // concurrency + (1 if i < n % concurrency else 0) for i in range(concurrency)]
    threads = [threading.Thread(target=worker, args=(c,)) for c in per]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return n / (time.perf_counter() - start), len(errors)


def run_bench(
    backend: str,
    n: int = 200,
    concurrency: int = 4,
    options: BackendOptions | None = None,
    warmup: int = 5,
    progress: Callable[[str, int, int], None] | None = None,
) -> BenchReport:
    """Measure ``backend`` against its baseline, interleaving the two series."""
    policy = Policy(timeout_s=30)
    notes: list[str] = ["no run log (recorder=None): this is the backend's cost"]
    if backend == "bwrap":
        label, baseline = _floor_runner(options)
    elif backend in ("docker", "gvisor"):
        label, baseline = _tutorial_runner(options)
    else:
        raise SandboxUnavailable(f"no baseline is defined for backend {backend!r}")
    failures = 0
    ours: list[float] = []
    base: list[float] = []
    # No run log: the figure is the backend's cost (the log's own cost is measured by
    # bench/ingest_bench.py).
    with Sandbox(backend, policy, options=options, agent_id="bench", recorder=None) as sandbox:
        for _ in range(warmup):
            sandbox.run(CODE)
            baseline()
        for i in range(n):
            # Interleave so that load spikes hit both series alike.
            start = time.perf_counter()
            res = sandbox.run(CODE)
            ours.append((time.perf_counter() - start) * 1000)
            if res.stdout != "1\n":
                failures += 1
            base.append(_time(baseline))
            if progress:
                progress("sequential", i + 1, n)
        calls_per_s, errors = measure_throughput(sandbox, n, concurrency, progress)
        failures += errors
    ours_s = Series.of(f"cellblock {backend}", ours)
    base_s = Series.of(label, base)
    return BenchReport(
        backend=backend,
        code=CODE,
        sandbox=ours_s,
        baseline=base_s,
        overhead_p50_ms=round(ours_s.p50_ms - base_s.p50_ms, 3),
        overhead_p95_ms=round(ours_s.p95_ms - base_s.p95_ms, 3),
        ratio_p50=round(ours_s.p50_ms / base_s.p50_ms, 3) if base_s.p50_ms else 0.0,
        concurrency=concurrency,
        calls_per_s=round(calls_per_s, 1),
        failures=failures,
        notes=notes,
    )
