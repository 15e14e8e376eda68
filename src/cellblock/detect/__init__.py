"""Collusion detectors: find agents coordinating across runs through the channels left."""

from cellblock.detect.base import Alert, Detector, Severity

__all__ = ["Alert", "Detector", "Severity"]
