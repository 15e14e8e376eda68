"""Fixtures for the log service tests (databases come from tests/logs/pg_support.py)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_name = "cellblock_tests_pg_support"
if _name not in sys.modules:
    _path = Path(__file__).resolve().parent.parent / "logs" / "pg_support.py"
    _spec = importlib.util.spec_from_file_location(_name, _path)
    assert _spec is not None and _spec.loader is not None
    sys.modules[_name] = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(sys.modules[_name])
_pg = sys.modules[_name]
pg_server = _pg.pg_server
pg_url = _pg.pg_url
db_url = _pg.db_url
