"""Repeated escape attempts: an agent whose runs keep hitting the sandbox's walls.

One blocked syscall or one denied connection is an accident; several within an agent's
recent runs is probing. Counts runs with violations or denied egress in a sliding window
of the agent's last runs, and alerts when the count reaches the threshold, then again
each time it doubles (so a persistent prober raises a few alerts, not one per run).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from typing import ClassVar

from cellblock.detect._text import clip
from cellblock.detect.base import Alert, Detector, Severity
from cellblock.logs.record import RunRecord

__all__ = ["RepeatedViolationDetector"]


class _AgentState:
    __slots__ = ("last_alert_at", "total", "window")

    def __init__(self, size: int) -> None:
        self.window: deque[tuple[str, tuple[str, ...]]] = deque(maxlen=size)
        self.total = 0
        self.last_alert_at = 0


class RepeatedViolationDetector(Detector):
    """Alerts when an agent has ``threshold`` runs with violations among its last
    ``window`` runs."""

    name: ClassVar[str] = "violations"

    def __init__(self, threshold: int = 3, window: int = 20, max_agents: int = 50_000) -> None:
        self.threshold = threshold
        self.window = window
        self.max_agents = max_agents
        self._agents: OrderedDict[str, _AgentState] = OrderedDict()

    def observe(self, record: RunRecord) -> list[Alert]:
        state = self._agents.get(record.agent_id)
        if state is None:
            state = self._agents[record.agent_id] = _AgentState(self.window)
            if len(self._agents) > self.max_agents:
                self._agents.popitem(last=False)
        else:
            self._agents.move_to_end(record.agent_id)
        kinds = list(record.violations)
        kinds += [f"egress denied {e.host}:{e.port}" for e in record.egress if not e.allowed]
        state.window.append((record.run_id, tuple(kinds)))
        if not kinds:
            return []
        state.total += 1
        hits = [(rid, k) for rid, k in state.window if k]
        if len(hits) < self.threshold or state.total < max(self.threshold,
                                                           2 * state.last_alert_at):
            return []
        state.last_alert_at = state.total
        seen: list[str] = []
        for _, ks in hits:
            for k in ks:
                if k not in seen:
                    seen.append(k)
        severity: Severity = "high" if len(hits) >= 2 * self.threshold else "medium"
        evidence = (f"{len(hits)} of the agent's last {len(state.window)} runs hit the "
                    f"sandbox: {'; '.join(seen)}")
        return [Alert(
            detector=self.name, severity=severity, agents=(record.agent_id,),
            run_ids=tuple(rid for rid, _ in hits), evidence=clip(evidence),
            details={"runs_with_violations": len(hits), "total": state.total},
        )]
