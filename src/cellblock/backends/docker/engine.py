"""One place where Docker Engine errors become cellblock errors.

Engine errors carry container IDs, overlay paths, socket paths and daemon internals. None
of that may reach a model: it is a map of the host and, across agents, a side channel.
Every call into the Docker SDK goes through :func:`engine_errors`, which turns any SDK,
HTTP or socket failure into :class:`~cellblock.errors.SandboxUnavailable` with a fixed,
generic message. The engine's own text goes to ``detail`` and to the log, for the
operator only.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from cellblock.errors import CellblockError, SandboxUnavailable

__all__ = ["EngineClients", "engine_errors"]

log = logging.getLogger("cellblock.docker")

DAEMON_HINT = (
    "start the Docker daemon (e.g. `dockerd > /var/log/dockerd.log 2>&1 &` or "
    "`systemctl start docker`) and check `docker info`; run `cellblock doctor` for details"
)


@contextmanager
def engine_errors(action: str) -> Iterator[None]:
    """Translate any engine failure during ``action`` into ``SandboxUnavailable``.

    ``action`` is a fixed phrase chosen by us ("start the sandbox"), never engine text,
    so it may appear in the operator log next to the engine's detail.
    """
    try:
        yield
    except CellblockError:
        raise
    except Exception as exc:
        if not _is_engine_error(exc):
            raise
        detail = f"{action}: {type(exc).__name__}: {exc}"
        log.warning("docker engine error: %s", detail)
        raise SandboxUnavailable(detail=detail, hint=_hint_for(exc)) from exc


def _is_engine_error(exc: BaseException) -> bool:
    import docker.errors
    import requests

    return isinstance(
        exc, docker.errors.DockerException | requests.RequestException | OSError | ValueError
    )


def _hint_for(exc: BaseException) -> str | None:
    import requests

    if isinstance(exc, requests.ConnectionError | ConnectionError | FileNotFoundError):
        return DAEMON_HINT
    return None


class EngineClients:
    """Docker API clients, one per thread.

    The SDK is synchronous and its ``requests`` session is not documented as thread-safe;
    the backend runs calls from many threads at once (``Sandbox.arun``, the pool filler),
    so each thread gets its own low-level client. The API version is negotiated once.
    ``Sandbox.arun`` uses a new thread per call, so clients of threads that have ended
    are closed whenever a new one is made: open connections stay bounded by live threads.
    """

    def __init__(self, base_url: str | None, timeout_s: float) -> None:
        self._base_url = base_url
        self._timeout = timeout_s
        self._version: str | None = None
        self._local = threading.local()
        self._lock = threading.Lock()
        self._all: list[tuple[threading.Thread, Any]] = []

    def get(self) -> Any:
        """The calling thread's ``docker.APIClient`` (created on first use)."""
        client = getattr(self._local, "client", None)
        if client is not None:
            return client
        import docker

        with engine_errors("connect to the Docker daemon"):
            kwargs: dict[str, Any] = {"timeout": self._timeout}
            if self._version is not None:
                kwargs["version"] = self._version
            if self._base_url is not None:
                client = docker.APIClient(base_url=self._base_url, **kwargs)
            else:
                client = docker.from_env(**kwargs).api
            if self._version is None:
                self._version = client.api_version
        self._local.client = client
        with self._lock:
            dead = [c for t, c in self._all if not t.is_alive()]
            self._all = [(t, c) for t, c in self._all if t.is_alive()]
            self._all.append((threading.current_thread(), client))
        for old in dead:
            _close_quietly(old)
        return client

    def close(self) -> None:
        with self._lock:
            clients, self._all = self._all, []
        for _, client in clients:
            _close_quietly(client)
        self._local = threading.local()


def _close_quietly(client: Any) -> None:
    try:
        client.close()
    except Exception:  # closing a dead connection: nothing to report
        log.debug("closing a docker client failed", exc_info=True)
