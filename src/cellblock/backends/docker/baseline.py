"""The tutorial design, measured as the baseline of ``cellblock bench``.

The usual way to "sandbox" code with Docker, as tutorials show it, is one ``docker run``
per call with the script bind-mounted from a host temp dir::

    docker run --rm --network none -v TMP:/app:ro IMAGE python3 /app/script.py

:func:`tutorial_docker_run_baseline` times exactly that, through the ``docker`` CLI in a
subprocess, so the benchmark can report cellblock's per-call latency as a ratio of it
measured in the same run, on the same machine and image.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from cellblock.errors import SandboxUnavailable

__all__ = ["BASELINE_SCRIPT", "tutorial_docker_run_baseline"]

BASELINE_SCRIPT = "print(1)\n"
_LABEL = "cellblock.baseline=1"


def tutorial_docker_run_baseline(image: str, n: int, *, timeout_s: float = 120) -> list[float]:
    """Wall time in seconds of ``n`` tutorial-style ``docker run`` calls of ``image``.

    ``image`` is a Docker reference (``cellblock/default:latest``). Each call runs
    ``python3 /app/script.py`` printing ``1``; a failing call raises
    :class:`~cellblock.errors.SandboxUnavailable` (a baseline that did not run is no
    baseline). The containers carry a ``cellblock.baseline`` label and ``--rm``; the temp
    directory is removed afterwards.
    """
    docker = shutil.which("docker")
    if docker is None:
        raise SandboxUnavailable(
            "the docker CLI is needed for the baseline",
            hint="install the docker client (apt-get install docker.io)",
        )
    times: list[float] = []
    tmp = Path(tempfile.mkdtemp(prefix="cellblock-baseline-"))
    try:
        tmp.chmod(0o755)
        script = tmp / "script.py"
        script.write_text(BASELINE_SCRIPT)
        script.chmod(0o644)
        argv = [
            docker, "run", "--rm", "--network", "none", "--label", _LABEL,
            "-v", f"{tmp}:/app:ro", image, "python3", "/app/script.py",
        ]
        for _ in range(n):
            t0 = time.perf_counter()
            proc = subprocess.run(argv, capture_output=True, timeout=timeout_s, check=False)
            elapsed = time.perf_counter() - t0
            if proc.returncode != 0 or proc.stdout.strip() != b"1":
                raise SandboxUnavailable(
                    "the tutorial docker run baseline failed",
                    detail=f"exit {proc.returncode}: {proc.stderr.decode(errors='replace')[:2000]}",
                )
            times.append(elapsed)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return times
