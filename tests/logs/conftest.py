"""Fixtures for the run log tests: databases (SQLite and a real PostgreSQL), records."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load_pg_support() -> ModuleType:
    """tests/ is not a package: load the shared helper by path, once per session."""
    name = "cellblock_tests_pg_support"
    if name in sys.modules:
        return sys.modules[name]
    path = Path(__file__).resolve().parent / "pg_support.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


_pg = load_pg_support()
pg_server = _pg.pg_server
pg_url = _pg.pg_url
db_url = _pg.db_url
