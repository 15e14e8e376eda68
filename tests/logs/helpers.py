"""Record factories shared by the log and server tests."""

from __future__ import annotations

from cellblock.logs.record import RunRecord


def make_record(i: int, *, agent: str | None = None, **fields: object) -> RunRecord:
    base: dict[str, object] = {
        "run_id": f"run-{i:06d}",
        "agent_id": agent or f"agent-{i % 4}",
        "session_id": "s1",
        "started_at": f"2026-11-29T12:{(i // 60) % 60:02d}:{i % 60:02d}+00:00",
        "duration_ms": 10.0 + i % 7,
        "backend": "bwrap",
        "code": f"print({i})",
        "stdout_raw": f"{i}\n",
        "stdout": f"{i}\n",
        "exit_code": 0,
    }
    base.update(fields)
    return RunRecord.model_validate(base)


class LiveServer:
    """A real uvicorn server for an app, on a loopback port, in a background thread."""

    def __init__(self, app: object, port: int | None = None) -> None:
        import socket
        import threading

        import uvicorn

        if port is None:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = int(s.getsockname()[1])
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",  # type: ignore[arg-type]
                                access_log=False)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> LiveServer:
        import time

        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=20)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
