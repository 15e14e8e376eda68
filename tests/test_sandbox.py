"""The Sandbox facade: validation, records, async cancellation (real bwrap)."""

from __future__ import annotations

import asyncio
import secrets

import pytest

from cellblock import (
    BackendNotFound,
    ImageNotFound,
    Policy,
    PolicyError,
    RunRecord,
    Sandbox,
    SandboxUnavailable,
)
from cellblock.backends.base import Backend, CancelToken, ExecRequest, RawOutcome
from cellblock.conformance.checks import host_processes_with
from tests.helpers import require_default_image


class EchoBackend(Backend):
    """A fake backend for facade logic only."""

    name = "echo"

    def execute(self, request: ExecRequest, cancel: CancelToken) -> RawOutcome:
        return RawOutcome(
            exit_code=0,
            stdout=request.code.encode() + b"\n/secret/host/path/x",
            stderr=b"\xff invalid utf8",
            stdout_truncated=False,
            stderr_truncated=False,
            timed_out=False,
            killed_reason=None,
            duration_ms=1.0,
            limits_enforced_by="cgroup",
            host_secrets=("/secret/host/path",),
        )


class ListRecorder:
    def __init__(self) -> None:
        self.records: list[RunRecord] = []
        self.closed = False

    def record(self, record: RunRecord) -> None:
        self.records.append(record)

    def close(self) -> None:
        self.closed = True


def test_unknown_backend_names_the_alternatives() -> None:
    with pytest.raises(BackendNotFound) as exc:
        Sandbox("nope")
    assert "bwrap" in str(exc.value)


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"language": "ruby"}, "unsupported language"),
        ({"files": {"../etc/passwd": b"x"}}, "invalid input file name"),
        ({"files": {"main.py": b"x"}}, "invalid input file name"),
        ({"files": {"a/b": b"x"}}, "invalid input file name"),
    ],
)
def test_bad_requests_are_policy_errors(kwargs: dict[str, object], fragment: str) -> None:
    sb = Sandbox(EchoBackend())
    with pytest.raises(PolicyError) as exc:
        sb.run("print(1)", **kwargs)  # type: ignore[arg-type]
    assert fragment in str(exc.value)


def test_record_has_raw_and_sanitised_views() -> None:
    rec = ListRecorder()
    sb = Sandbox(EchoBackend(), agent_id="agent-7", session_id="s1", recorder=rec)
    result = sb.run("hello")
    assert "/secret/host/path" not in result.stdout
    assert "<host-path>" in result.stdout
    assert result.stderr.startswith("\ufffd")
    (record,) = rec.records
    assert record.agent_id == "agent-7" and record.session_id == "s1"
    assert "/secret/host/path" in record.stdout_raw
    assert record.stdout == result.stdout
    assert record.run_id == result.run_id
    sb.close()
    assert rec.closed


def test_bad_agent_id() -> None:
    with pytest.raises(PolicyError):
        Sandbox(EchoBackend(), agent_id="has spaces and ../")


def test_missing_image_names_the_build_command(tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CELLBLOCK_HOME", str(tmp_path))
    with pytest.raises(ImageNotFound) as exc:
        Sandbox("bwrap")
    assert exc.value.hint is not None and "cellblock image build" in exc.value.hint


def test_allowlist_network_fails_closed() -> None:
    require_default_image()
    from cellblock import NetworkPolicy

    with pytest.raises(SandboxUnavailable):
        Sandbox("bwrap", Policy(network=NetworkPolicy(mode="allowlist", allow=("example.com",))))


@pytest.mark.integration
def test_arun_cancellation_kills_the_sandbox() -> None:
    require_default_image()
    marker = f"cbcancel{secrets.token_hex(5)}"

    async def main() -> None:
        async with Sandbox("bwrap", Policy(timeout_s=60)) as sb:
            task = asyncio.create_task(
                sb.arun(f"exec -a {marker} sleep 1000", language="bash")
            )
            for _ in range(100):
                await asyncio.sleep(0.05)
                if host_processes_with(marker):
                    break
            assert host_processes_with(marker), "the sandboxed process never started"
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert not host_processes_with(marker), "cancelled sandbox left a process"

    asyncio.run(main())


@pytest.mark.integration
def test_arun_concurrent_calls_are_isolated() -> None:
    require_default_image()

    async def main() -> list[str]:
        async with Sandbox("bwrap") as sb:
            results = await asyncio.gather(
                *(sb.arun(f"import os\nopen('f','w').write('{i}')\nprint(os.listdir('.'))")
                  for i in range(6))
            )
        return [r.stdout.strip() for r in results]

    outs = asyncio.run(main())
    assert outs == ["['main.py', 'f']"] * 6 or all(sorted(eval(o)) == ["f", "main.py"] for o in outs)


@pytest.mark.integration
def test_sync_cancel_token() -> None:
    require_default_image()
    sb = Sandbox("bwrap", Policy(timeout_s=60))
    token = CancelToken()
    import threading

    threading.Timer(0.5, token.cancel).start()
    result = sb.run("import time\ntime.sleep(100)", _cancel=token)
    assert result.killed_reason == "cancelled"
    sb.close()


def test_too_many_input_files_is_a_policy_error() -> None:
    sb = Sandbox(EchoBackend(), recorder=None)
    with pytest.raises(PolicyError) as exc:
        sb.run("print(1)", files={f"f{i}.txt": b"x" for i in range(33)})
    assert "at most 32 input files" in str(exc.value)
    # 32 is fine.
    sb.run("print(1)", files={f"f{i}.txt": b"x" for i in range(32)})


@pytest.mark.integration
def test_many_input_files_reach_the_sandbox() -> None:
    require_default_image()
    files = {f"in{i}.txt": str(i).encode() for i in range(32)}
    with Sandbox("bwrap", recorder=None) as sb:
        r = sb.run("import glob\nprint(sum(int(open(f).read()) for f in glob.glob('in*.txt')))",
                   files=files)
    assert r.stdout.strip() == str(sum(range(32))), r
