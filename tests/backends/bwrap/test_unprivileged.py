"""The bwrap backend run by an unprivileged user, for real (not root with cgroups
switched off): no cgroup can be created, so a default policy is refused (fail closed),
and with ``unsafe_allow_missing={"cgroups"}`` the whole conformance suite passes on
rlimits.

The test drops to ``nobody`` with setpriv. The project's virtualenv may live under a
private directory (its interpreter under /root), so the unprivileged process gets a
world-readable copy of what the backend imports: the cellblock package and pydantic
with its dependencies, run by an interpreter of the same Python version that ``nobody``
can execute.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import require
from tests.helpers import require_default_image

pytestmark = pytest.mark.integration

NOBODY = 65534
# What `cellblock.conformance` and the bwrap backend import outside the standard library.
_PACKAGES = ("cellblock", "pydantic", "pydantic_core", "annotated_types", "typing_extensions",
             "typing_inspection")

_SCRIPT = """
import json
from cellblock import Policy, Sandbox
from cellblock.errors import ProtectionUnavailable
from cellblock.conformance import run_checks

try:
    Sandbox("bwrap", Policy(), recorder=None)
    refused = None
except ProtectionUnavailable as exc:
    refused = exc.protection
checks = [[o.name, o.passed, o.detail] for o in
          run_checks("bwrap", allow_missing=frozenset({"cgroups"}))]
with Sandbox("bwrap", Policy(unsafe_allow_missing={"cgroups"}), recorder=None) as sb:
    r = sb.run("import os; print(os.getuid())")
print(json.dumps({"refused": refused, "checks": checks, "uid": r.stdout.strip(),
                  "enforced_by": r.limits_enforced_by}))
"""


def _as_nobody(argv: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    setpriv = shutil.which("setpriv")
    assert setpriv is not None
    return subprocess.run(
        [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *argv],
        env=env, cwd="/tmp", capture_output=True, text=True, timeout=timeout, check=False)


def _copy_packages(dest: Path) -> None:
    for name in _PACKAGES:
        module = importlib.import_module(name)
        origin = Path(module.__file__ or "")
        if origin.name == "__init__.py":
            shutil.copytree(origin.parent, dest / name,
                            ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(origin, dest / origin.name)


def _interpreter(env: dict[str, str]) -> str | None:
    """An interpreter of this Python version that nobody can run, with the copied
    packages importable (compiled extensions must match the version)."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (sys.executable, f"/usr/bin/python{version}", f"/usr/local/bin/python{version}"):
        if not os.path.exists(candidate):
            continue
        # The backend starts helpers with sys.executable: that must work as nobody too.
        probe = _as_nobody([candidate, "-c", "import subprocess, sys, pydantic_core, cellblock; "
                            "subprocess.run([sys.executable, '-c', ''], check=True)"], env, 60)
        if probe.returncode == 0:
            return candidate
    return None


@pytest.fixture
def nobody_env() -> Iterator[dict[str, str]]:
    """A world-readable CELLBLOCK_HOME (sharing the built images) and library copy."""
    root = Path(tempfile.mkdtemp(prefix="cellblock-nobody-", dir="/tmp"))
    try:
        root.chmod(0o755)
        lib, home = root / "lib", root / "home"
        lib.mkdir()
        home.mkdir()
        _copy_packages(lib)
        images = (Path(os.environ["CELLBLOCK_HOME"]) / "images").resolve()
        (home / "images").symlink_to(images, target_is_directory=True)
        for path in (root, lib, home):
            os.chown(path, NOBODY, NOBODY) if path == home else path.chmod(0o755)
        yield {"PATH": "/usr/bin:/bin", "HOME": str(home), "CELLBLOCK_HOME": str(home),
               "PYTHONPATH": str(lib), "LANG": "C.UTF-8"}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_unprivileged_user_fails_closed_then_passes_the_suite_on_rlimits(
        nobody_env: dict[str, str]) -> None:
    require_default_image()
    require(os.geteuid() == 0, "needs root to drop to nobody")
    require(shutil.which("setpriv") is not None, "setpriv (util-linux) is not installed")
    python = _interpreter(nobody_env)
    require(python is not None,
            "no Python of this version that an unprivileged user can run (/usr/bin/python3.X)")
    assert python is not None
    done = _as_nobody([python, "-c", _SCRIPT], nobody_env, 600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["refused"] == "cgroups"  # fail closed without the opt-out
    failed = [c for c in result["checks"] if not c[1]]
    assert not failed, failed
    from cellblock.conformance import CHECKS

    assert len(result["checks"]) == len(CHECKS)
    assert result["uid"] == "1000" and result["enforced_by"] == "rlimit"
