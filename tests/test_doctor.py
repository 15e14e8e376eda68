"""cellblock doctor: real checks on this host, plus the report's logic and rendering."""

from __future__ import annotations

import io
import json
import os
import tempfile
from pathlib import Path
from typing import ClassVar

import pytest
from click.testing import CliRunner
from rich.console import Console

from cellblock import backends
from cellblock import doctor as d
from cellblock.backends import register_backend
from cellblock.backends.base import Backend, CancelToken, ExecRequest, HostCheck, RawOutcome
from cellblock.cli.main import cli

STATUSES = {"ok", "warn", "fail"}


# --------------------------------------------------------------------------- real host


@pytest.mark.integration
def test_real_host_checks() -> None:
    checks = d.run_checks()
    by_name = {c.name: c for c in checks}
    for name in ("bwrap", "bwrap sandbox", "user namespaces", "cgroups", "seccomp",
                 "debootstrap", "default image", "docker", "gvisor (runsc)"):
        assert name in by_name, name
    assert all(c.status in STATUSES for c in checks)
    assert all(c.fix for c in checks if c.status == "fail"), [c for c in checks if not c.fix]
    # This machine (and CI) has bubblewrap 0.8, user namespaces, libseccomp and cgroups.
    assert by_name["bwrap"].status == "ok", by_name["bwrap"]
    assert by_name["bwrap sandbox"].status == "ok", by_name["bwrap sandbox"]
    assert by_name["user namespaces"].status == "ok", by_name["user namespaces"]
    assert by_name["seccomp"].status == "ok", by_name["seccomp"]
    assert by_name["cgroups"].status in {"ok", "warn"}, by_name["cgroups"]
    assert by_name["debootstrap"].status == "ok"
    assert d.bwrap_works(checks)
    # Every backend the registry knows appears, either with its own checks or as a line.
    for backend in ("bwrap", "docker", "gvisor"):
        assert any(c.name.startswith((f"{backend}: ", f"{backend} backend")) for c in checks)


@pytest.mark.integration
def test_cli_json_on_this_host() -> None:
    result = CliRunner().invoke(cli, ["doctor", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["bwrap_works"] is True
    assert {c["status"] for c in report["checks"]} <= STATUSES
    assert {"name", "status", "detail", "fix"} <= set(report["checks"][0])


@pytest.mark.integration
def test_cli_table_on_this_host() -> None:
    result = CliRunner().invoke(cli, ["doctor"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "bwrap sandbox" in result.output
    assert "bwrap sandboxes work on this host" in result.output


# --------------------------------------------------------------------------- logic and rendering


def fake_checks(bwrap_status: str = "ok") -> list[HostCheck]:
    return [
        HostCheck("bwrap", bwrap_status, "bwrap 0.8.0", None if bwrap_status == "ok"  # type: ignore[arg-type]
                  else "apt-get install bubblewrap"),
        HostCheck("bwrap sandbox", "ok", "works"),
        HostCheck("docker", "warn", "Docker daemon not reachable", "start dockerd"),
        HostCheck("cgroups", "fail", "cgroup v2 without pids controller", "enable pids"),
    ]


def test_render_report() -> None:
    out = io.StringIO()
    d.render_report(fake_checks(), Console(file=out, width=200, color_system=None))
    text = out.getvalue()
    for expected in ("cellblock doctor", "bwrap 0.8.0", "warn", "fail", "start dockerd",
                     "enable pids", "2 ok, 1 warn, 1 fail",
                     "bwrap sandboxes work on this host"):
        assert expected in text, expected


def test_render_report_when_bwrap_fails() -> None:
    out = io.StringIO()
    checks = fake_checks("fail")
    d.render_report(checks, Console(file=out, width=200, color_system=None))
    assert "bwrap sandboxes do NOT work" in out.getvalue()
    assert "apt-get install bubblewrap" in out.getvalue()
    assert not d.bwrap_works(checks)
    assert not d.bwrap_works([c for c in fake_checks() if c.name != "bwrap sandbox"])
    assert d.bwrap_works(fake_checks())


def test_report_json() -> None:
    report = d.report_json(fake_checks())
    assert report["bwrap_works"] is True
    assert report["checks"][2] == {"name": "docker", "status": "warn",
                                   "detail": "Docker daemon not reachable",
                                   "fix": "start dockerd"}
    json.dumps(report)


def test_cli_exit_code_1_when_bwrap_does_not_work(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(d, "run_checks", lambda: fake_checks("fail"))
    result = CliRunner().invoke(cli, ["doctor"], env={"COLUMNS": "200"})
    assert result.exit_code == 1
    assert "Traceback" not in result.output
    result = CliRunner().invoke(cli, ["doctor", "--json"])
    assert result.exit_code == 1
    assert json.loads(result.output)["bwrap_works"] is False


def test_a_crashing_check_becomes_a_fail_line(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom() -> HostCheck:
        raise RuntimeError("kaboom")

    monkeypatch.setattr(d, "check_seccomp", boom)
    checks = d.run_checks(backends=False)
    seccomp = next(c for c in checks if c.name == "seccomp")
    assert seccomp.status == "fail"
    assert "kaboom" in seccomp.detail
    assert seccomp.fix


class _ChecksBackend(Backend):
    name: ClassVar[str] = "doctor-test-ok"

    def execute(self, request: ExecRequest, cancel: CancelToken) -> RawOutcome:
        raise NotImplementedError

    @classmethod
    def host_checks(cls) -> list[HostCheck]:
        return [HostCheck("thing", "warn", "half there", "install the rest")]


class _CrashingBackend(_ChecksBackend):
    name: ClassVar[str] = "doctor-test-crash"

    @classmethod
    def host_checks(cls) -> list[HostCheck]:
        raise OSError("no such device")


def test_backend_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backends, "_registered", dict(backends._registered))
    register_backend(_ChecksBackend)
    register_backend(_CrashingBackend)
    monkeypatch.setattr(d, "available_backends",
                        lambda: ["doctor-test-ok", "doctor-test-crash", "doctor-test-missing"])
    real_get = d.get_backend_class

    def get(name: str) -> type[Backend]:
        if name == "doctor-test-missing":
            raise ModuleNotFoundError("No module named 'cellblock.backends.missing'")
        return real_get(name)

    monkeypatch.setattr(d, "get_backend_class", get)
    checks = {c.name: c for c in d.check_backends()}
    assert checks["doctor-test-ok: thing"] == HostCheck("doctor-test-ok: thing", "warn",
                                                         "half there", "install the rest")
    assert checks["doctor-test-crash backend"].status == "fail"
    assert "OSError: no such device" in checks["doctor-test-crash backend"].detail
    missing = checks["doctor-test-missing backend"]
    assert missing.status == "fail"
    assert "unavailable" in missing.detail and "cellblock.backends.missing" in missing.detail


def test_cgroup_v2_detection(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("cpu io memory\n")
    check = d.check_cgroups(tmp_path)
    assert check.status == "fail" and "pids" in check.detail and check.fix
    (tmp_path / "cgroup.controllers").write_text("cpu io memory pids\n")
    check = d.check_cgroups(tmp_path)
    assert "v2" in check.detail
    assert check.status == ("ok" if os.access(tmp_path, os.W_OK) and os.geteuid() == 0
                            else "fail")


def test_cgroups_without_root_fail_with_the_opt_out_as_fix(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bwrap backend refuses default policies when it cannot create cgroups."""
    (tmp_path / "memory").mkdir()
    (tmp_path / "pids").mkdir()
    monkeypatch.setattr(d.os, "geteuid", lambda: 1000)
    check = d.check_cgroups(tmp_path)
    assert check.status == "fail" and "not root" in check.detail
    assert "unsafe_allow_missing={'cgroups'}" in (check.fix or "")
    (tmp_path / "cgroup.controllers").write_text("memory pids\n")
    check = d.check_cgroups(tmp_path)
    assert check.status == "fail" and "not root" in check.detail


def test_cgroup_v1_detection(tmp_path: Path) -> None:
    check = d.check_cgroups(tmp_path)
    assert check.status == "fail" and "memory" in check.detail
    (tmp_path / "memory").mkdir()
    (tmp_path / "pids").mkdir()
    check = d.check_cgroups(tmp_path)
    assert check.status == "ok" and "v1" in check.detail


def test_missing_bwrap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(d.shutil, "which", lambda name: None)
    for check in (d.check_bwrap(), d.check_bwrap_sandbox()):
        assert check.status == "fail"
        assert "apt-get install bubblewrap" in (check.fix or "")
    assert not d.bwrap_works([d.check_bwrap(), d.check_bwrap_sandbox()])


def test_unreachable_docker_is_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    checks = d.check_docker()
    assert checks[0].name == "docker" and checks[0].status == "warn"
    assert "dockerd" in (checks[0].fix or "")
    assert checks[1].name == "gvisor (runsc)" and checks[1].status == "warn"


def test_backend_check_names_are_prefixed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    class Prefixed(_ChecksBackend):
        name: ClassVar[str] = "doctor-test-prefixed"

        @classmethod
        def host_checks(cls) -> list[HostCheck]:
            return [HostCheck("doctor-test-prefixed: daemon", "ok", "up")]

    monkeypatch.setattr(backends, "_registered", dict(backends._registered))
    register_backend(Prefixed)
    monkeypatch.setattr(d, "available_backends", lambda: ["doctor-test-prefixed"])
    assert [c.name for c in d.check_backends()] == ["doctor-test-prefixed: daemon"]



def test_default_image_below_a_private_directory_is_a_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Not under tmp_path: pytest's base temp dir is itself 0700.
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        os.chmod(tmp, 0o755)
        home = Path(tmp) / "private" / "home"
        (home / "images/default/rootfs/usr/bin").mkdir(parents=True)
        (home / "images/default/manifest.json").write_text('{"name": "default"}')
        monkeypatch.setenv("CELLBLOCK_HOME", str(home))
        assert d.check_default_image().status == "ok"
        os.chmod(home.parent, 0o700)
        check = d.check_default_image()
        os.chmod(home.parent, 0o755)
    assert check.status == "warn"
    assert "not searchable" in check.detail
    assert check.fix and "chmod o+x" in check.fix
