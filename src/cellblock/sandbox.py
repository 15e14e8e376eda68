"""The public entry point: ``Sandbox(...).run(code)``.

A :class:`Sandbox` is a configured factory, not a long-lived environment: every call to
:meth:`Sandbox.run` gets a brand-new sandbox that is destroyed before the call returns.
Reusing a ``Sandbox`` object across calls shares configuration only, never state.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import time
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Literal, get_args

from cellblock.backends import get_backend_class
from cellblock.backends.base import Backend, BackendOptions, CancelToken, ExecRequest
from cellblock.errors import CellblockError, PolicyError, SandboxUnavailable
from cellblock.logs.record import Recorder, RunRecord
from cellblock.policy import Language, Policy
from cellblock.result import ExecResult
from cellblock.sanitize import sanitizer_for

__all__ = ["Sandbox"]

log = logging.getLogger("cellblock")

_FILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_MAX_FILES_BYTES = 64 * 1024 * 1024
_MAX_FILES = 32
_MAX_CODE_BYTES = 4 * 1024 * 1024
_MAX_STDIN_BYTES = 64 * 1024 * 1024
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$")


class Sandbox:
    """Runs agent code, one fresh sandbox per call.

    Args:
        backend: ``"bwrap"`` (default), ``"docker"``, ``"gvisor"``, or any registered name.
        policy: Limits and permissions; :class:`Policy` defaults deny everything.
        options: The backend's typed options (e.g. which image); backend defaults if None.
        agent_id: Tags every run record with the calling agent.
        session_id: Tags every run record with the conversation or episode.
        recorder: Where run records go. ``"default"``: the embedded run log
            (``<cellblock_home>/runs.db``), or the log service named by
            ``CELLBLOCK_LOG_URL``. ``None``: keep no records.

    Raises:
        BackendNotFound: unknown backend name.
        ImageNotFound: the backend's image is missing (the hint names the build command).
        ProtectionUnavailable: the host cannot apply a protection the policy requires.
    """

    def __init__(
        self,
        backend: str | Backend = "bwrap",
        policy: Policy | None = None,
        *,
        options: BackendOptions | None = None,
        agent_id: str = "anonymous",
        session_id: str = "default",
        recorder: Recorder | Literal["default"] | None = "default",
    ) -> None:
        if not _ID.match(agent_id) or not _ID.match(session_id):
            raise PolicyError("agent_id and session_id must be short identifiers")
        self.policy = policy if policy is not None else Policy()
        if isinstance(backend, Backend):
            self._backend = backend
        else:
            cls = get_backend_class(backend)
            if options is not None and not isinstance(options, cls.options_type):
                raise PolicyError(
                    f"backend {backend!r} takes {cls.options_type.__name__}, "
                    f"not {type(options).__name__}"
                )
            self._backend = cls(options)
        self._backend.prepare(self.policy)
        self.agent_id = agent_id
        self.session_id = session_id
        if recorder == "default":
            from cellblock.logs.transport import default_recorder

            recorder = default_recorder()
        self.recorder: Recorder | None = recorder
        self._closed = False

    @property
    def backend_name(self) -> str:
        return self._backend.name

    def run(
        self,
        code: str,
        language: Language = "python",
        files: Mapping[str, bytes] | None = None,
        stdin: bytes | str | None = None,
        *,
        policy: Policy | None = None,
        _cancel: CancelToken | None = None,
    ) -> ExecResult:
        """Run ``code`` in a fresh sandbox and return its result.

        Args:
            code: Source code of the program.
            language: ``"python"`` or ``"bash"``.
            files: Input files, name -> content, placed read-only beside the code.
            stdin: Bytes (or text, UTF-8 encoded) fed to the program's standard input.
            policy: Override this Sandbox's policy for one call.
        """
        if self._closed:
            raise SandboxUnavailable("this Sandbox has been closed")
        request = self._request(code, language, files, stdin, policy or self.policy)
        cancel = _cancel or CancelToken()
        started_at = datetime.now(UTC)
        t0 = time.monotonic()
        try:
            raw = self._backend.execute(request, cancel)
        except CellblockError as exc:
            log.warning("sandbox call %s failed: %s", request.run_id, exc.operator_message())
            raise
        except Exception as exc:  # a bug or an unexpected host failure: never leak it
            log.exception("sandbox call %s crashed", request.run_id)
            raise SandboxUnavailable(detail=repr(exc)) from exc
        sanitize = sanitizer_for(raw.host_secrets)
        limit = request.policy.output_limit_bytes
        stdout_raw = _decode(raw.stdout[:limit])
        stderr_raw = _decode(raw.stderr[:limit])
        result = ExecResult(
            run_id=request.run_id,
            exit_code=raw.exit_code,
            stdout=sanitize(stdout_raw),
            stderr=sanitize(stderr_raw),
            timed_out=raw.timed_out,
            killed_reason=raw.killed_reason,
            truncated=raw.stdout_truncated or raw.stderr_truncated,
            duration_ms=round(raw.duration_ms, 3),
            backend=self._backend.name,
            limits_enforced_by=raw.limits_enforced_by,
            limits_hit=raw.limits_hit,
        )
        if self.recorder is not None:
            self._record(request, result, raw.violations, stdout_raw, stderr_raw, started_at)
        log.debug("run %s took %.1f ms overall", request.run_id, (time.monotonic() - t0) * 1000)
        return result

    async def arun(
        self,
        code: str,
        language: Language = "python",
        files: Mapping[str, bytes] | None = None,
        stdin: bytes | str | None = None,
        *,
        policy: Policy | None = None,
    ) -> ExecResult:
        """Async :meth:`run`. Cancelling the awaiting task kills the sandbox before the
        cancellation propagates, so a cancelled call leaves nothing behind."""
        cancel = CancelToken()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[ExecResult] = loop.create_future()

        done = threading.Event()

        def worker() -> None:
            try:
                res = self.run(code, language, files, stdin, policy=policy, _cancel=cancel)
            except BaseException as exc:  # delivered to the awaiting task
                loop.call_soon_threadsafe(_set_exception, future, exc)
            else:
                loop.call_soon_threadsafe(_set_result, future, res)
            finally:
                done.set()

        threading.Thread(target=worker, name="cellblock-run", daemon=True).start()
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            cancel.cancel()
            # Wait (without blocking the loop) until the sandbox is really gone.
            await asyncio.to_thread(done.wait)
            raise

    def close(self) -> None:
        """Release backend resources (pools, clients) and flush the recorder."""
        if self._closed:
            return
        self._closed = True
        self._backend.close()
        if self.recorder is not None:
            self.recorder.close()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    async def __aenter__(self) -> Sandbox:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await asyncio.to_thread(self.close)

    # -- internals -------------------------------------------------------------------

    def _request(
        self,
        code: str,
        language: str,
        files: Mapping[str, bytes] | None,
        stdin: bytes | str | None,
        policy: Policy,
    ) -> ExecRequest:
        if language not in get_args(Language):
            raise PolicyError(
                f"unsupported language {language!r}; use one of {', '.join(get_args(Language))}"
            )
        if not isinstance(code, str):
            raise PolicyError("code must be a string")
        if "\0" in code:
            raise PolicyError("code must not contain NUL bytes")
        if len(code.encode("utf-8", "surrogatepass")) > _MAX_CODE_BYTES:
            raise PolicyError("code is larger than 4 MiB")
        checked: dict[str, bytes] = {}
        total = 0
        if files and len(files) > _MAX_FILES:
            raise PolicyError(f"at most {_MAX_FILES} input files per call (got {len(files)})")
        for name, content in (files or {}).items():
            if not isinstance(name, str) or not _FILE_NAME.match(name) or name in ("main.py", "main.sh"):
                raise PolicyError(
                    f"invalid input file name {name!r}: use a plain name like 'data.csv' "
                    "(letters, digits, '.', '_', '-'; no directories; not main.py/main.sh)"
                )
            data = content.encode() if isinstance(content, str) else content
            if not isinstance(data, bytes | bytearray):
                raise PolicyError(f"input file {name!r} must be bytes")
            total += len(data)
            checked[name] = bytes(data)
        if total > _MAX_FILES_BYTES:
            raise PolicyError("input files are larger than 64 MiB in total")
        stdin_bytes = stdin.encode() if isinstance(stdin, str) else stdin
        if stdin_bytes is not None and len(stdin_bytes) > _MAX_STDIN_BYTES:
            raise PolicyError("stdin is larger than 64 MiB")
        return ExecRequest(
            run_id=uuid.uuid4().hex,
            language=language,  # type: ignore[arg-type]
            code=code,
            policy=policy,
            files=checked,
            stdin=stdin_bytes,
        )

    def _record(
        self,
        request: ExecRequest,
        result: ExecResult,
        violations: tuple[str, ...],
        stdout_raw: str,
        stderr_raw: str,
        started_at: datetime,
    ) -> None:
        assert self.recorder is not None
        record = RunRecord(
            run_id=request.run_id,
            agent_id=self.agent_id,
            session_id=self.session_id,
            started_at=started_at.isoformat(),
            duration_ms=result.duration_ms,
            backend=result.backend,
            language=request.language,
            code=request.code,
            stdout_raw=stdout_raw,
            stderr_raw=stderr_raw,
            stdout=result.stdout,
            stderr=result.stderr,
            exit_code=result.exit_code,
            timed_out=result.timed_out,
            killed_reason=result.killed_reason,
            truncated=result.truncated,
            violations=violations,
        )
        try:
            self.recorder.record(record)
        except Exception:  # a recorder must never fail the call; it should spool itself
            log.exception("recorder failed for run %s", request.run_id)


def _decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def _set_result(future: asyncio.Future[Any], value: Any) -> None:
    if not future.done():
        future.set_result(value)


def _set_exception(future: asyncio.Future[Any], exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)
