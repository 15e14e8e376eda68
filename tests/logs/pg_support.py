"""A throwaway PostgreSQL cluster for the log store and service tests.

Uses CELLBLOCK_TEST_PG_URL when given (it must allow CREATE DATABASE). Otherwise it runs
initdb + pg_ctl from /usr/lib/postgresql/<ver>/bin into a temp dir (as the ``postgres``
OS user when we are root), listening on a free loopback port, and removes it all at the
end. In CI (CI=true) a cluster that cannot start fails the tests instead of skipping.
Loaded by both tests/logs/conftest.py and tests/server/conftest.py; one cluster serves
the whole session (reference-counted).
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

_state: dict[str, object] = {"refs": 0, "url": None, "dir": None, "error": None}


def _pg_bin() -> Path | None:
    root = Path("/usr/lib/postgresql")
    versions = sorted(root.glob("*/bin/initdb"), key=lambda p: int(p.parts[-3]), reverse=True)
    return versions[0].parent if versions else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_postgres(cmd: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


def _start() -> str:
    bindir = _pg_bin()
    if bindir is None:
        raise RuntimeError("PostgreSQL server binaries not found (apt-get install postgresql)")
    tmp = Path(tempfile.mkdtemp(prefix="cellblock-pg-"))
    _state["dir"] = tmp
    if os.geteuid() == 0:
        pw = pwd.getpwnam("postgres")
        os.chown(tmp, pw.pw_uid, pw.pw_gid)
    data, port = tmp / "data", _free_port()
    subprocess.run(_as_postgres([str(bindir / "initdb"), "-D", str(data), "-A", "trust",
                                 "-U", "postgres", "--no-sync", "-E", "UTF8"]),
                   check=True, capture_output=True, timeout=120)
    opts = (f"-p {port} -k {tmp} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off")
    subprocess.run(_as_postgres([str(bindir / "pg_ctl"), "-D", str(data), "-o", opts, "-w",
                                 "-t", "60", "-l", str(tmp / "log"), "start"]),
                   check=True, capture_output=True, timeout=90)
    return f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"


def _stop() -> None:
    tmp = _state.get("dir")
    bindir = _pg_bin()
    if isinstance(tmp, Path):
        if bindir is not None and (tmp / "data" / "postmaster.pid").exists():
            subprocess.run(_as_postgres([str(bindir / "pg_ctl"), "-D", str(tmp / "data"),
                                         "-m", "immediate", "-w", "stop"]),
                           capture_output=True, timeout=60, check=False)
        shutil.rmtree(tmp, ignore_errors=True)
    _state.update(url=None, dir=None)


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"PostgreSQL is required in CI: {reason}")
    pytest.skip(f"PostgreSQL unavailable: {reason}")


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """URL of a PostgreSQL server (admin database) for the whole session."""
    external = os.environ.get("CELLBLOCK_TEST_PG_URL")
    if external:
        yield external
        return
    if _state["url"] is None and _state["error"] is None:
        try:
            _state["url"] = _start()
        except (OSError, RuntimeError, subprocess.SubprocessError, KeyError) as exc:
            detail = getattr(exc, "stderr", b"") or b""
            _state["error"] = f"{exc} {detail.decode(errors='replace')[-500:]}"
            _stop()
    if _state["url"] is None:
        _unavailable(str(_state["error"]))
    _state["refs"] = int(str(_state["refs"])) + 1
    try:
        yield str(_state["url"])
    finally:
        _state["refs"] = int(str(_state["refs"])) - 1
        if _state["refs"] == 0:
            _stop()


def _fresh_pg_database(admin_url: str) -> Iterator[str]:
    import psycopg
    from sqlalchemy.engine import make_url

    url = make_url(admin_url.replace("postgresql://", "postgresql+psycopg://", 1))
    name = f"cb_test_{uuid.uuid4().hex[:12]}"
    conninfo = url.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield url.set(database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def pg_url(pg_server: str) -> Iterator[str]:
    """A fresh, empty PostgreSQL database for one test."""
    yield from _fresh_pg_database(pg_server)


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database: SQLite file, then PostgreSQL."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'runs.db'}"
        return
    admin = request.getfixturevalue("pg_server")
    yield from _fresh_pg_database(admin)
