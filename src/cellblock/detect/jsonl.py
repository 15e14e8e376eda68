"""Read run records from a JSON Lines file, tolerantly.

One JSON object per line with the fields of :class:`~cellblock.logs.record.RunRecord`.
Unknown fields are ignored and missing optional fields take their defaults; a line that
is not a JSON object, or lacks ``run_id``, or has a field of the wrong type, is reported
as a :class:`LineProblem` with its line number and skipped. Reading never raises on bad
content, so one corrupt line cannot hide the rest of a log.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from pydantic import ValidationError

from cellblock.logs.record import RunRecord

__all__ = ["LineProblem", "parse_lines"]


@dataclass(frozen=True)
class LineProblem:
    """A line that could not be read as a run record."""

    line: int
    error: str


def parse_lines(lines: Iterable[str]) -> Iterator[RunRecord | LineProblem]:
    """Yield a record or a problem per non-blank line (line numbers start at 1)."""
    for number, line in enumerate(lines, start=1):
        text = line.strip()
        if not text:
            continue
        try:
            obj = json.loads(text)
        except (json.JSONDecodeError, RecursionError) as exc:
            yield LineProblem(number, f"not valid JSON ({exc.__class__.__name__}: "
                                      f"{str(exc)[:80]})")
            continue
        if not isinstance(obj, dict):
            yield LineProblem(number, f"expected a JSON object, got {type(obj).__name__}")
            continue
        if not isinstance(obj.get("run_id"), str) or not obj["run_id"]:
            yield LineProblem(number, "missing run_id")
            continue
        # started_at matters for ordering only; a record without one is still evidence.
        obj.setdefault("started_at", "")
        for key in ("agent_id", "session_id"):
            if obj.get(key) is None:
                obj.pop(key, None)
        try:
            yield RunRecord.model_validate(obj)
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = ".".join(str(p) for p in first["loc"]) or "record"
            yield LineProblem(number, f"{loc}: {first['msg']}")
