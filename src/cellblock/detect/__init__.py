"""Collusion detectors: find agents coordinating across runs through the channels left.

:class:`DetectionEngine` runs every detector over run records as they arrive
(``observe``/``finish``) or in batch (``analyze``); see docs/detectors.md.
"""

from cellblock.detect.base import Alert, Detector, Severity
from cellblock.detect.engine import DetectionEngine, default_detectors

__all__ = ["Alert", "DetectionEngine", "Detector", "Severity", "default_detectors"]
