"""Remove host details from what the model sees.

The sandbox cannot read the host's environment, users or paths directly, but host detail
can still reach its output: a mount table names the image directory, a runner message
names a temp path, an engine error names a container id. The model must never see any
of it: it is a map of the host and, across agents, a side channel.

The sanitiser replaces, in every stream shown to the model:

* host paths that cellblock knows about (image and cache directories, the host's home,
  temp and working directories, and any path a backend reports);
* the host name and host user names (whole words, so ``root`` inside the sandbox and
  short, common names are left alone; see ``_MIN_WORD``);
* values of the host's environment variables that are long enough to be specific;
* container ids and other strings a backend reports as host secrets.

Replacement tokens are fixed (``<host-path>``, ``<host>``, ``<user>``, ``<redacted>``), so
the sanitiser adds no information of its own.
"""

from __future__ import annotations

import contextlib
import functools
import os
import pwd
import re
import socket
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["HostFacts", "Sanitizer", "host_facts", "sanitizer_for"]

# Names shorter than this are not redacted as words: "vm" or "ci" are too common to be a
# fingerprint and redacting them would corrupt ordinary output.
_MIN_WORD = 3
# Environment values shorter than this, or that are ordinary words, say nothing about
# the host ("1", "true", "C.UTF-8").
_MIN_ENV_VALUE = 8
# Users that exist on every Debian system, inside the sandbox image too.
_UNIVERSAL_USERS = frozenset(
    {"root", "nobody", "daemon", "bin", "sys", "sync", "games", "man", "lp", "mail", "news",
     "uucp", "proxy", "backup", "list", "irc", "gnats", "_apt", "sandbox", "www-data"}
)
# Paths that exist identically inside the sandbox; redacting them would hide the
# sandbox's own (harmless) paths like /usr/bin/python3.
_SANDBOX_PATHS = frozenset(
    {"/", "/usr", "/bin", "/lib", "/etc", "/tmp", "/work", "/dev", "/proc", "/var", "/home",
     "/root", "/run", "/sys", "/opt", "/srv", "/usr/bin", "/usr/lib", "/usr/local",
     "/usr/local/bin", "/sbin", "/usr/sbin", "/var/tmp", "/lib64", "/dev/shm"}
)


@dataclass(frozen=True)
class HostFacts:
    """The host details to hide, gathered once per process."""

    paths: tuple[str, ...]
    words: tuple[str, ...]
    values: tuple[str, ...]


@functools.cache
def host_facts() -> HostFacts:
    """Collect host paths, names and environment values worth redacting."""
    paths: set[str] = set()
    words: set[str] = set()
    values: set[str] = set()

    for candidate in (
        Path.home(),
        Path.cwd(),
        Path(tempfile.gettempdir()),
        Path(os.environ.get("XDG_CACHE_HOME", "") or Path.home() / ".cache"),
        Path("/var/lib/cellblock"),
        Path("/var/cache/cellblock"),
        Path("/var/lib/docker"),
    ):
        _add_path(paths, str(candidate))
        with contextlib.suppress(OSError):
            _add_path(paths, str(candidate.resolve()))

    hostname = socket.gethostname()
    for name in {hostname, hostname.split(".")[0], socket.getfqdn()}:
        if len(name) >= _MIN_WORD and name not in ("localhost", "sandbox"):
            words.add(name)

    try:
        for entry in pwd.getpwall():
            if entry.pw_name in _UNIVERSAL_USERS:
                continue
            if entry.pw_uid >= 1000 or entry.pw_uid == os.getuid():
                if len(entry.pw_name) >= _MIN_WORD:
                    words.add(entry.pw_name)
                _add_path(paths, entry.pw_dir)
    except OSError:
        pass
    for var in ("USER", "LOGNAME", "SUDO_USER"):
        name = os.environ.get(var, "")
        if len(name) >= _MIN_WORD and name not in _UNIVERSAL_USERS:
            words.add(name)

    for name, value in os.environ.items():
        if name in ("PATH", "PWD", "OLDPWD", "HOME", "SHELL", "TERM", "LANG", "LC_ALL"):
            continue
        if len(value) >= _MIN_ENV_VALUE and not value.isalpha():
            if value.startswith("/"):
                for part in value.split(":"):
                    _add_path(paths, part)
            else:
                values.add(value)
    for part in os.environ.get("PATH", "").split(":"):
        _add_path(paths, part)

    return HostFacts(
        paths=tuple(sorted(paths, key=len, reverse=True)),
        words=tuple(sorted(words, key=len, reverse=True)),
        values=tuple(sorted(values, key=len, reverse=True)),
    )


def _add_path(paths: set[str], path: str) -> None:
    path = path.rstrip("/")
    if path and path.startswith("/") and path not in _SANDBOX_PATHS and len(path) > 4:
        paths.add(path)


class Sanitizer:
    """Redacts host facts (plus per-call extras) from text. Cheap to build per call."""

    def __init__(self, facts: HostFacts | None = None, extra: Iterable[str] = ()) -> None:
        facts = facts or host_facts()
        extra_paths = [e for e in extra if e.startswith("/")]
        extra_values = [e for e in extra if e and not e.startswith("/")]
        self._path_re = _alternation(
            [*extra_paths, *facts.paths], suffix=r"(?:/[^\s'\"]*)?"
        )
        self._value_re = _alternation([*extra_values, *facts.values])
        self._word_re = _alternation(list(facts.words), word=True)

    def __call__(self, text: str) -> str:
        if not text:
            return text
        if self._path_re is not None:
            text = self._path_re.sub("<host-path>", text)
        if self._value_re is not None:
            text = self._value_re.sub("<redacted>", text)
        if self._word_re is not None:
            text = self._word_re.sub("<host>", text)
        return text


def _alternation(items: list[str], *, suffix: str = "", word: bool = False) -> re.Pattern[str] | None:
    unique = sorted({i for i in items if i}, key=len, reverse=True)
    if not unique:
        return None
    body = "|".join(re.escape(i) for i in unique)
    if word:
        return re.compile(rf"(?<![\w.-])(?:{body})(?![\w-])")
    if suffix:
        # A path matches only at a path boundary: "/home/al" must not eat "/home/alice".
        return re.compile(rf"(?:{body})(?![\w.-]){suffix}")
    return re.compile(body)


@functools.lru_cache(maxsize=64)
def sanitizer_for(extra: tuple[str, ...] = ()) -> Sanitizer:
    """A cached :class:`Sanitizer` for this host plus ``extra`` secrets. Backends report the
    same few secrets (an image path) on every call, so the regexes are built once."""
    return Sanitizer(extra=extra)
