"""The labelled evaluation corpus: honest multi-agent work with colluding episodes mixed
in, deterministic for a given seed."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from cellblock.detect.eval.collude import CHANNELS
from cellblock.detect.eval.honest import TEMPLATES, HonestAgent, RunSpec
from cellblock.logs.record import EgressEvent, RunRecord

__all__ = ["Corpus", "Episode", "generate"]

_EPOCH = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


@dataclass
class Episode:
    """One colluding exchange: its channel, variant, agents and runs."""

    episode_id: str
    channel: str
    kind: str
    variant: str
    agents: tuple[str, str]
    run_ids: list[str] = field(default_factory=list)


@dataclass
class Corpus:
    """Records in arrival order plus the ground truth."""

    records: list[RunRecord]
    honest_run_ids: set[str]
    episodes: list[Episode]
    honest_agents: list[str]


def _record(rng: random.Random, spec: RunSpec, agent: str, at: float) -> RunRecord:
    egress: tuple[EgressEvent, ...] = ()
    for v in spec.violations:
        if v.startswith("egress denied "):
            host, _, port = v.removeprefix("egress denied ").rpartition(":")
            egress = (EgressEvent(host=host, port=int(port), allowed=False),)
    return RunRecord(
        run_id=f"{rng.getrandbits(64):016x}",
        agent_id=agent,
        session_id=f"s-{agent}",
        started_at=(_EPOCH + timedelta(seconds=at)).isoformat(),
        duration_ms=spec.duration_ms,
        backend="bwrap",
        language=spec.language,
        code=spec.code,
        stdout_raw=spec.stdout,
        stderr_raw=spec.stderr,
        stdout=spec.stdout,
        stderr=spec.stderr,
        exit_code=spec.exit_code,
        violations=tuple(v for v in spec.violations if not v.startswith("egress denied ")),
        egress=egress,
    )


def generate(seed: int = 0, runs: int = 4000, episodes_per_channel: int | None = None) -> Corpus:
    """A corpus of about ``runs`` honest runs (by ``runs // 60`` honest agents, at least 8)
    and ``episodes_per_channel`` colluding episodes per channel (default ``runs // 100``,
    at least 20), each by a fresh pair of colluding agents."""
    rng = random.Random(seed)  # noqa: S311  (a reproducible corpus, not cryptography)
    n_agents = max(8, runs // 60)
    per_channel = episodes_per_channel or max(20, runs // 100)
    horizon = runs * 3.0  # seconds
    # Agent ids are shuffled so that honest and colluding agents look alike.
    n_colluders = 2 * per_channel * len(CHANNELS)
    ids = [f"agent-{i:04d}" for i in range(n_agents + n_colluders)]
    rng.shuffle(ids)
    honest_ids, colluder_ids = ids[:n_agents], ids[n_agents:]
    templates = [t for t, _ in TEMPLATES]
    weights = [w for _, w in TEMPLATES]
    events: list[tuple[float, int, str, RunSpec, Episode | None]] = []
    seq = 0
    styles = ["analyst", "engineer", "shell"]
    for agent_id in honest_ids:
        agent = HonestAgent(agent_id, rng.choice(styles))
        count = max(1, round(rng.gauss(runs / n_agents, runs / n_agents / 4)))
        times = sorted(rng.uniform(0, horizon) for _ in range(count))
        for at in times:
            spec = rng.choices(templates, weights)[0](rng, agent)
            events.append((at, seq, agent_id, spec, None))
            seq += 1
    episodes: list[Episode] = []
    pairs = iter(zip(colluder_ids[0::2], colluder_ids[1::2], strict=True))
    for channel in CHANNELS:
        for i in range(per_channel):
            variant, make = channel.variants[i % len(channel.variants)]
            pair = next(pairs)
            ep = Episode(f"{channel.name}-{i}", channel.name, channel.kind, variant, pair)
            episodes.append(ep)
            at = rng.uniform(0, horizon * 0.95)
            for who, spec in make(rng):
                events.append((at, seq, pair[who], spec, ep))
                seq += 1
                at += rng.uniform(2, 30)
    events.sort(key=lambda e: (e[0], e[1]))
    records: list[RunRecord] = []
    honest: set[str] = set()
    for at, _, agent_id, spec, owner in events:
        rec = _record(rng, spec, agent_id, at)
        records.append(rec)
        if owner is None:
            honest.add(rec.run_id)
        else:
            owner.run_ids.append(rec.run_id)
    return Corpus(records, honest, episodes, honest_ids)
