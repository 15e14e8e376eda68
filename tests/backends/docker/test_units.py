"""Unit tests of the Docker backend's own logic (no daemon): framing, spec, pool, errors."""

from __future__ import annotations

import io
import struct
import tarfile
import threading

import pytest

from cellblock.backends.base import ExecRequest
from cellblock.backends.docker.engine import engine_errors
from cellblock.backends.docker.options import DockerOptions
from cellblock.backends.docker.pool import WarmPool
from cellblock.backends.docker.spec import READY_MARKER, build_bundle, build_spec
from cellblock.backends.docker.stream import CappedDemux
from cellblock.errors import SandboxUnavailable
from cellblock.policy import Policy


def frame(stream: int, data: bytes) -> bytes:
    return struct.pack(">BxxxI", stream, len(data)) + data


class TestDemux:
    def test_marker_stripped_and_streams_split(self) -> None:
        d = CappedDemux(1024, READY_MARKER)
        raw = frame(1, READY_MARKER[:5]) + frame(1, READY_MARKER[5:] + b"out") + frame(2, b"err")
        for i in range(len(raw)):  # one byte at a time: headers and payloads split anywhere
            d.feed(raw[i : i + 1])
        assert d.ready
        assert bytes(d.stdout) == b"out"
        assert bytes(d.stderr) == b"err"

    def test_without_marker_not_ready(self) -> None:
        d = CappedDemux(1024, READY_MARKER)
        d.feed(frame(2, b"tar: error"))
        assert not d.ready
        d.feed(frame(1, b"x" * len(READY_MARKER)))
        assert d.state == "failed"
        assert not d.ready

    def test_cap_bounds_memory_on_a_flood(self) -> None:
        d = CappedDemux(1000, READY_MARKER)
        d.feed(frame(1, READY_MARKER))
        chunk = b"A" * 65536
        for _ in range(200):  # 13 MB without a newline
            d.feed(frame(1, chunk))
        assert len(d.stdout) == 1000
        assert d.stdout_total == 200 * 65536
        assert d.overflowed
        assert len(d.stderr) == 0


class TestSpec:
    def test_runc_hardening(self) -> None:
        policy = Policy(memory_mb=128, max_pids=32, scratch_mb=8, env={"MODE": "x"})
        spec = build_spec(DockerOptions(), policy, "runc")
        hc = spec.host_config
        assert hc["network_mode"] == "none"
        assert hc["read_only"] is True
        assert hc["cap_drop"] == ["ALL"]
        assert "no-new-privileges:true" in hc["security_opt"]
        assert any(o.startswith("seccomp=") for o in hc["security_opt"])
        assert hc["pids_limit"] == 32
        assert hc["mem_limit"] == hc["memswap_limit"] == 128 * 1024 * 1024
        assert hc["ipc_mode"] == "private"
        assert hc["shm_size"] == 8 * 1024 * 1024
        assert hc["init"] is True
        assert "size=8m" in hc["tmpfs"]["/work"] and "size=8m" in hc["tmpfs"]["/tmp"]
        assert spec.config["hostname"] == "sandbox"
        assert spec.config["environment"] == {
            "PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/work", "LANG": "C.UTF-8",
            "TMPDIR": "/tmp", "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1", "MODE": "x",
        }
        assert spec.image == "cellblock/default:latest"

    def test_gvisor_limits_guest_processes_with_nproc(self) -> None:
        spec = build_spec(DockerOptions(), Policy(max_pids=32), "runsc")
        hc = spec.host_config
        assert hc["runtime"] == "runsc"
        assert {"Name": "nproc", "Soft": 31, "Hard": 31} in hc["ulimits"]
        # Enforced inside gVisor's kernel (the runtime must be registered with --oci-seccomp).
        assert any(o.startswith("seccomp=") for o in hc["security_opt"])

    def test_pool_key_depends_on_policy(self) -> None:
        a = build_spec(DockerOptions(), Policy(), "runc").key
        assert a == build_spec(DockerOptions(), Policy(), "runc").key
        assert a != build_spec(DockerOptions(), Policy(memory_mb=128), "runc").key
        assert a != build_spec(DockerOptions(), Policy(), "runsc").key

    def test_user_image_reference(self) -> None:
        assert DockerOptions(image="python:3.12-slim").image_reference == "python:3.12-slim"
        with pytest.raises(ValueError):
            DockerOptions(image="bad image;rm")

    def test_bundle_layout(self) -> None:
        req = ExecRequest(run_id="r", language="python", code="print(1)\n", policy=Policy(),
                          files={"data.csv": b"a,b\n"}, stdin=None)
        bundle = build_bundle(req)
        header, _, body = bundle.partition(b"\n")
        lang, size = header.split()
        assert lang == b"python" and int(size) == len(body)
        with tarfile.open(fileobj=io.BytesIO(body)) as tar:
            members = {m.name: m for m in tar.getmembers()}
        assert members["work"].mode == 0o1777
        assert members["work/main.py"].mode == 0o444 and members["work/main.py"].uid == 0
        assert members[".input/data.csv"].mode == 0o444
        assert members["work/data.csv"].issym()
        assert members["work/data.csv"].linkname == "/.input/data.csv"


class TestPool:
    def make(
        self, size: int = 2, max_age: float = 300
    ) -> tuple[WarmPool[str], list[str], list[str]]:
        created: list[str] = []
        removed: list[str] = []
        lock = threading.Lock()

        def create(key: str) -> str:
            with lock:
                cid = f"{key}-{len(created)}"
                created.append(cid)
            return cid

        def remove(cid: str) -> None:
            with lock:
                removed.append(cid)

        return WarmPool(size, max_age, create, remove, lambda c: c), created, removed

    def wait_for(self, pool: WarmPool[str], n: int) -> None:
        for _ in range(500):
            if len(pool.pooled()) >= n:
                return
            threading.Event().wait(0.01)
        raise AssertionError("pool did not fill")

    def test_never_hands_out_a_container_twice(self) -> None:
        pool, created, removed = self.make()
        pool.warm("k")
        seen: list[str] = []
        for _ in range(20):
            self.wait_for(pool, 1)
            cid = pool.take("k")
            assert cid is not None
            seen.append(cid)
        assert len(seen) == len(set(seen))
        pool.close()
        assert set(removed) == set(created) - set(seen)

    def test_concurrent_takes_are_distinct(self) -> None:
        pool, _, _ = self.make(size=8)
        pool.warm("k")
        self.wait_for(pool, 8)
        got: list[str | None] = []
        lock = threading.Lock()

        def worker() -> None:
            cid = pool.take("k")
            with lock:
                got.append(cid)

        threads = [threading.Thread(target=worker) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        ids = [c for c in got if c is not None]
        assert len(ids) == len(set(ids))
        pool.close()

    def test_expired_containers_are_removed_not_used(self) -> None:
        pool, created, removed = self.make(size=1, max_age=0.05)
        pool.warm("k")
        self.wait_for(pool, 1)
        first = created[0]
        threading.Event().wait(0.2)
        cid = pool.take("k")
        assert cid != first
        assert first in removed
        pool.close()

    def test_size_zero_disables(self) -> None:
        pool, created, _ = self.make(size=0)
        pool.warm("k")
        assert pool.take("k") is None
        assert created == []


def test_engine_error_message_is_safe() -> None:
    import docker.errors

    secret = "container 3f2a9c1b7d6e is at /var/lib/docker/overlay2/abc/merged"
    with pytest.raises(SandboxUnavailable) as info, engine_errors("start the sandbox"):
        raise docker.errors.APIError(secret)
    exc = info.value
    assert "3f2a9c1b7d6e" not in str(exc)
    assert "/var/lib/docker" not in exc.safe_message
    assert exc.detail is not None and "3f2a9c1b7d6e" in exc.detail


def test_engine_clients_of_ended_threads_are_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    from cellblock.backends.docker import engine

    closed: list[int] = []

    class FakeClient:
        api_version = "1.41"

        def __init__(self, n: int) -> None:
            self.n = n

        def close(self) -> None:
            closed.append(self.n)

    made: list[FakeClient] = []

    def from_env(**kwargs: object) -> object:
        client = FakeClient(len(made))
        made.append(client)
        return type("D", (), {"api": client})()

    import docker

    monkeypatch.setattr(docker, "from_env", from_env)
    clients = engine.EngineClients(None, 5)
    for _ in range(20):  # like Sandbox.arun: one short-lived thread per call
        t = threading.Thread(target=clients.get)
        t.start()
        t.join()
    assert len(made) == 20
    assert len(closed) == 19  # all but the last thread's, closed as new ones were made
    clients.close()
    assert len(closed) == 20
