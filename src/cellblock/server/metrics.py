"""Prometheus metrics of the log service, in a registry of its own per app (so several
apps in one process, as in tests, do not clash)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["Metrics"]


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.runs_ingested = Counter(
            "cellblock_runs_ingested", "Run records stored (new, not duplicates).",
            registry=self.registry)
        self.runs_duplicate = Counter(
            "cellblock_runs_duplicate", "Run records received again with identical content.",
            registry=self.registry)
        self.runs_conflict = Counter(
            "cellblock_runs_conflict",
            "Run records rejected: a different record already has their run_id.",
            registry=self.registry)
        self.alerts_raised = Counter(
            "cellblock_alerts_raised", "Alerts stored, by detector.", ["detector"],
            registry=self.registry)
        self.ingest_seconds = Histogram(
            "cellblock_ingest_seconds", "Time to store one POSTed batch (and analyse it, with inline detection).",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=self.registry)
        self.batch_records = Histogram(
            "cellblock_ingest_batch_records", "Records per POSTed batch.",
            buckets=(1, 10, 50, 100, 250, 500, 1000, 2500, 5000, 10000),
            registry=self.registry)
        self.detect_seconds = Histogram(
            "cellblock_detect_seconds", "Detector time per batch of runs analysed.",
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5),
            registry=self.registry)
        self.detected_seq = Gauge(
            "cellblock_detected_seq", "Every run up to this sequence number was analysed.",
            registry=self.registry)
        self.chain_head = Gauge(
            "cellblock_chain_head_seq", "Sequence number of the newest stored run.",
            registry=self.registry)
