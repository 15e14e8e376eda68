"""Collusion detectors: find agents coordinating across runs through the channels left.

:class:`~cellblock.detect.engine.DetectionEngine` runs every detector over run records as
they arrive (``observe``/``finish``) or in batch (``analyze``); see docs/detectors.md.
The engine is imported lazily: the log store imports :mod:`cellblock.detect.base` for the
Alert model and must not pay for numpy on every CLI start.
"""

from typing import TYPE_CHECKING, Any

from cellblock.detect.base import Alert, Detector, Severity

if TYPE_CHECKING:
    from cellblock.detect.engine import DetectionEngine, default_detectors

__all__ = ["Alert", "DetectionEngine", "Detector", "Severity", "default_detectors"]


def __getattr__(name: str) -> Any:
    if name in ("DetectionEngine", "default_detectors"):
        from cellblock.detect import engine

        return getattr(engine, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
