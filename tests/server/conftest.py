"""Fixtures for the log service tests. Databases and record helpers come from tests/logs
(loaded by path: tests/ is not a package, so it cannot be imported by name)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def _load(name: str, filename: str) -> ModuleType:
    if name not in sys.modules:
        path = Path(__file__).resolve().parent.parent / "logs" / filename
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


_load("cellblock_tests_helpers", "helpers.py")
_pg = _load("cellblock_tests_pg_support", "pg_support.py")
pg_server = _pg.pg_server
pg_url = _pg.pg_url
db_url = _pg.db_url
