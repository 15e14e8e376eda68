#!/usr/bin/env python3
"""Log service benchmark: ingestion rate through the HTTP API, and alert latency.

Starts a real ``cellblock serve`` (SQLite in a temp dir, every built-in detector on) on
a free loopback port, then:

1. streams ``--records`` run records in batches of ``--batch`` from ``--clients``
   threads and reports records/s (wall clock, first request to last response);
2. alert latency, idle server: POSTs a record carrying zero-width characters (the
   Unicode steganography detector fires on that one record) and polls
   ``GET /v1/alerts`` until the alert is visible; then two agents share a rare key
   (one prints it, the other types it in its code) and it measures from the POST of
   the second (colluding) record until the ``shared-tokens`` alert is visible, and the
   same for two agents running the same unusual encoder (``near-duplicate-code``); on a
   quiet server those two detectors decide on their time bound; ``--probes`` times each;
3. the same probes while a background client streams at ``--load-rate`` records/s;
4. same-run baselines: raw SQLAlchemy ``executemany`` into a fresh SQLite file (no
   chain, no parsing), ``Store.append`` (chain, no HTTP, no detection), and the
   detection engine alone.

Usage: ``.venv/bin/python bench/ingest_bench.py [--records 50000] [--batch 500]``.
Everything runs on this machine; traffic goes to 127.0.0.1 only; it stops by itself.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import socket
import statistics
import string
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import requests
from sqlalchemy import create_engine

from cellblock.detect.engine import DetectionEngine
from cellblock.logs.record import RunRecord
from cellblock.logs.schema import metadata, runs
from cellblock.logs.store import Store

_CLI = "from cellblock.cli.main import main; main()"


_TEMPLATES = [
    "import {m}\n{a} = [{m}.sqrt(i) for i in range({n})]\nprint(sum({a}) / len({a}))\n",
    "def {f}({a}):\n    return {a} * {k} + {n}\n\nfor {b} in range({k}):\n    print({f}({b}))\n",
    "{a} = {{}}\nfor {b} in '{w}'.split():\n    {a}[{b}] = {a}.get({b}, 0) + 1\n"
    "print(sorted({a}.items()))\n",
    "import json\n{a} = json.loads('{{\"{w}\": {n}}}')\nprint({a}['{w}'] * {k})\n",
    "class {F}:\n    def __init__(self, {a}):\n        self.{a} = {a}\n    def {f}(self):\n"
    "        return self.{a} ** 2\nprint({F}({n}).{f}())\n",
    "{a} = sorted(range({n}), key=lambda {b}: ({b} * {k}) % 97)\nprint({a}[:5])\n",
    "import re\n{a} = re.findall(r'[a-z]+', '{w} {w2}')\nprint(len({a}), {a})\n",
    "with open('data.csv') as {a}:\n    {b} = [line.split(',') for line in {a}]\n"
    "print(len({b}))\n",
    "from collections import Counter\n{a} = Counter('{w}{w2}')\nprint({a}.most_common({k}))\n",
    "{a}, {b} = 0, 1\nfor _ in range({n}):\n    {a}, {b} = {b}, {a} + {b}\nprint({a})\n",
]


def _ident(rng: random.Random) -> str:
    return rng.choice(string.ascii_lowercase) + "".join(
        rng.choice(string.ascii_lowercase + "_") for _ in range(rng.randrange(2, 9)))


def _word(rng: random.Random) -> str:
    return "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randrange(3, 10)))


def _program(rng: random.Random, varied: bool) -> str:
    if not varied:  # every agent runs the same script with other numbers
        k = rng.randrange(1000)
        return (f"import statistics\nxs = list(range({k}))\n"
                f"print(f'mean={{statistics.mean(xs or [0]):.4f}} n={{len(xs)}}')\n")
    parts = rng.sample(_TEMPLATES, rng.randrange(1, 4))
    return "\n".join(p.format(
        m=rng.choice(["math", "cmath"]), a=_ident(rng), b=_ident(rng), f=_ident(rng),
        F=_ident(rng).title(), n=rng.randrange(1, 500), k=rng.randrange(2, 20),
        w=_word(rng), w2=_word(rng)) for p in parts)


def make_records(n: int, prefix: str, seed: int = 7, varied: bool = True) -> list[RunRecord]:
    """Ordinary-looking runs of 50 agents. ``varied``: programs built from ten small
    templates with random names and constants (different tasks); otherwise one script
    for everyone (the costly case for the near-duplicate-code detector)."""
    rng = random.Random(seed)  # noqa: S311 - test data, not secrets
    out = []
    for i in range(n):
        stdout = f"{rng.random() * 100:.4f}\n"
        out.append(RunRecord(
            run_id=f"{prefix}-{i:07d}", agent_id=f"agent-{i % 50:02d}", session_id=f"s{i % 7}",
            started_at="2026-11-29T12:00:00.000000+00:00", duration_ms=rng.uniform(5, 80),
            backend="bwrap", language="python", code=_program(rng, varied),
            stdout_raw=stdout, stdout=stdout, exit_code=0,
        ))
    return out


def encode(batch: list[RunRecord]) -> bytes:
    return ('{"runs":[' + ",".join(r.model_dump_json() for r in batch) + "]}").encode()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(tmp: Path, port: int) -> subprocess.Popen[bytes]:
    # An open loopback service: a token from the caller's shell would refuse our requests.
    env = {k: v for k, v in os.environ.items()
           if k not in ("CELLBLOCK_SERVE_TOKEN", "CELLBLOCK_SERVE_READ_TOKEN")}
    env["CELLBLOCK_HOME"] = str(tmp)
    proc = subprocess.Popen(
        [sys.executable, "-c", _CLI, "serve", "--port", str(port), "--db", str(tmp / "runs.db"),
         "--warm-runs", "0", "--log-level", "warning"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if requests.get(f"http://127.0.0.1:{port}/healthz", timeout=1).ok:
                return proc
        except requests.ConnectionError:
            time.sleep(0.1)
    proc.kill()
    proc.wait()
    raise SystemExit("cellblock serve did not start")


def post(session: requests.Session, url: str, body: bytes) -> dict[str, object]:
    resp = session.post(url + "/v1/runs", data=body, timeout=120,
                        headers={"Content-Type": "application/json"})
    resp.raise_for_status()
    result: dict[str, object] = resp.json()
    return result


def ingest(url: str, bodies: list[bytes], clients: int) -> float:
    """Send every body; return wall seconds."""
    chunks = [bodies[i::clients] for i in range(clients)]
    errors: list[BaseException] = []

    def worker(mine: list[bytes]) -> None:
        with requests.Session() as s:
            try:
                for body in mine:
                    post(s, url, body)
            except BaseException as exc:
                errors.append(exc)

    threads = [threading.Thread(target=worker, args=(c,)) for c in chunks]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return time.perf_counter() - t0


def last_alert_id(s: requests.Session, url: str) -> int:
    alerts = s.get(url + "/v1/alerts", params={"limit": 1}, timeout=30).json()["alerts"]
    return int(alerts[0]["id"]) if alerts else 0


def wait_alert(s: requests.Session, url: str, after: int, detector: str, t0: float,
               run_id: str, timeout: float = 30.0) -> float:
    """Seconds from ``t0`` until an alert of ``detector`` naming ``run_id`` is visible."""
    while time.perf_counter() - t0 < timeout:
        found = s.get(url + "/v1/alerts", params={"after_id": after, "detector": detector,
                                                   "run_id": run_id},
                      timeout=30).json()["alerts"]
        if found:
            return time.perf_counter() - t0
        time.sleep(0.005)
    return float("nan")


def _stego(tag: str, p: int) -> RunRecord:
    """A record the unicode detector flags on its own (zero-width characters)."""
    text = "the answer is 4" + "\u200b\u200c" * (4 + p % 3) + "2\n"
    return RunRecord(run_id=f"stego-{tag}-{p}", agent_id="agent-stego",
                     started_at="2026-11-29T12:00:00+00:00", code="print('the answer is 42')",
                     stdout_raw=text, stdout=text, exit_code=0)


def _pair(tag: str, p: int) -> tuple[RunRecord, RunRecord]:
    """Agent red prints a rare key; agent blue types it in its code (shared-tokens)."""
    key = f"Zq{p}x7Kv-{tag}{p * 7919 % 1_000_000:06d}"
    a = RunRecord(run_id=f"colluder-a-{tag}-{p}", agent_id=f"agent-red-{tag}",
                  started_at="2026-11-29T12:00:00+00:00",
                  code=f"print('{key}')", stdout_raw=key + "\n", exit_code=0)
    b = RunRecord(run_id=f"colluder-b-{tag}-{p}", agent_id=f"agent-blue-{tag}",
                  started_at="2026-11-29T12:00:00+00:00",
                  code=f"key = '{key}'\nprint('ok')", stdout_raw="ok\n", exit_code=0)
    return a, b


def _twins(tag: str, p: int) -> tuple[RunRecord, RunRecord]:
    """Two agents run the same unusual encoder, with other constants (near-duplicate-code).
    Every probe gets fresh identifiers, so probes are not one family of look-alikes."""
    rng = random.Random(f"{tag}-{p}")  # noqa: S311 - test data
    n = [_ident(rng) for _ in range(8)]
    template = (
        "def {0}({1}, {2}):\n"
        "    {3} = bytearray()\n"
        "    for {4}, {5} in enumerate({1}.encode()):\n"
        "        {3}.append(({5} ^ ({2} * ({4} + 7))) & 0xFF)\n"
        "    return {3}.hex()[::-1]\n"
        "{6} = {0}('{{msg}}', {{key}})\n"
        "print(len({6}), {6}[:{{cut}}], sum(map(ord, {6})) % 251)\n"
    ).format(*n)
    a = RunRecord(run_id=f"twin-a-{tag}-{p}", agent_id=f"agent-amber-{tag}",
                  started_at="2026-11-29T12:00:00+00:00", exit_code=0, stdout_raw="ok\n",
                  code=template.format(msg="meet at dawn", key=13, cut=8))
    b = RunRecord(run_id=f"twin-b-{tag}-{p}", agent_id=f"agent-jade-{tag}",
                  started_at="2026-11-29T12:00:00+00:00", exit_code=0, stdout_raw="ok\n",
                  code=template.format(msg="meet at dawn", key=29, cut=8))
    return a, b


def _probe(s: requests.Session, url: str, tag: str, p: int) -> tuple[float, ...]:
    """One probe per kind: seconds from the start of the POST of the decisive (last)
    record until its alert is visible through GET /v1/alerts (unicode, shared-tokens,
    near-duplicate-code)."""
    cases: list[tuple[str, tuple[RunRecord, ...]]] = [
        ("unicode", (_stego(tag, p),)),
        ("shared-tokens", _pair(tag, p)),
        ("near-duplicate-code", _twins(tag, p)),
    ]
    out: list[float] = []
    for detector, records in cases:
        after = last_alert_id(s, url)
        for earlier in records[:-1]:
            post(s, url, encode([earlier]))
        t0 = time.perf_counter()
        post(s, url, encode([records[-1]]))
        out.append(wait_alert(s, url, after, detector, t0, records[-1].run_id))
    return tuple(out)


Latencies = dict[str, list[float]]
KINDS = ("unicode", "shared-tokens", "near-duplicate-code")


def latency_idle(url: str, probes: int) -> Latencies:
    """Probes on a quiet server: no other traffic, so the corpus-wide detectors decide
    on their time bound, not on their record count."""
    out: Latencies = {k: [] for k in KINDS}
    with requests.Session() as s:
        for p in range(probes):
            for kind, value in zip(KINDS, _probe(s, url, "idle", p), strict=True):
                out[kind].append(value)
    return out


def latency_under_load(url: str, background: list[bytes], per_batch: int, rate: float,
                       probes: int) -> tuple[Latencies, float]:
    """The same probes while a background client streams at ``rate`` records/s.
    Returns the latencies per detector and the background rate achieved."""
    out: Latencies = {k: [] for k in KINDS}
    stop = threading.Event()
    sent = [0, 0.0]

    def stream() -> None:
        interval = per_batch / rate
        with requests.Session() as s:
            t0 = time.perf_counter()
            for n, body in enumerate(background):
                if stop.is_set():
                    break
                delay = t0 + n * interval - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                post(s, url, body)
                sent[0] += per_batch
            sent[1] = time.perf_counter() - t0

    bg = threading.Thread(target=stream)
    bg.start()
    try:
        with requests.Session() as s:
            time.sleep(2.0)  # let the stream reach its rate
            for p in range(probes):
                for kind, value in zip(KINDS, _probe(s, url, "load", p), strict=True):
                    out[kind].append(value)
                if not bg.is_alive():
                    break
    finally:
        stop.set()
        bg.join()
    return out, sent[0] / sent[1] if sent[1] else 0.0


def catch_up(url: str) -> tuple[float, float]:
    """Seconds until the first and the last detection worker have analysed the head."""
    t0 = time.perf_counter()
    done: dict[int, float] = {}
    with requests.Session() as s:
        while time.perf_counter() - t0 < 600:
            health = s.get(url + "/healthz", timeout=30).json()
            seqs = health.get("worker_seqs") or [health["detected_seq"]]
            for i, seq in enumerate(seqs):
                if seq >= health["head_seq"] and i not in done:
                    done[i] = time.perf_counter() - t0
            if len(done) == len(seqs):
                break
            time.sleep(0.05)
    return min(done.values(), default=float("nan")), max(done.values(), default=float("nan"))


def baseline_raw_insert(records: list[RunRecord], batch: int, tmp: Path) -> float:
    engine = create_engine(f"sqlite:///{tmp / 'raw.db'}")
    metadata.create_all(engine)
    rows = [{"seq": i + 1, "run_id": r.run_id, "agent_id": r.agent_id,
             "session_id": r.session_id, "started_at": r.started_at, "received_at": 0.0,
             "exit_code": r.exit_code, "duration_ms": r.duration_ms,
             "body": r.model_dump_json(), "prev_hash": "", "hash": ""}
            for i, r in enumerate(records)]
    with engine.connect() as conn:
        conn.exec_driver_sql("PRAGMA journal_mode=WAL")
        conn.exec_driver_sql("PRAGMA synchronous=NORMAL")
        conn.commit()
    t0 = time.perf_counter()
    for i in range(0, len(rows), batch):
        with engine.begin() as conn:
            conn.execute(runs.insert(), rows[i:i + batch])
    dt = time.perf_counter() - t0
    engine.dispose()
    return len(rows) / dt


def baseline_store(records: list[RunRecord], batch: int, tmp: Path) -> float:
    store = Store(str(tmp / "store.db"))
    t0 = time.perf_counter()
    for i in range(0, len(records), batch):
        store.append(records[i:i + batch])
    dt = time.perf_counter() - t0
    store.close()
    return len(records) / dt


def baseline_engine(records: list[RunRecord]) -> float:
    engine = DetectionEngine()
    t0 = time.perf_counter()
    for r in records:
        engine.observe(r)
    return len(records) / (time.perf_counter() - t0)


def fmt_ms(values: list[float]) -> str:
    ok = [v for v in values if not math.isnan(v)]
    if not ok:
        return "no alert seen"
    return (f"median {statistics.median(ok) * 1000:.0f} ms, max {max(ok) * 1000:.0f} ms "
            f"({len(ok)}/{len(values)} seen)")


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--records", type=int, default=50_000)
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--clients", type=int, default=2)
    ap.add_argument("--probes", type=int, default=10)
    ap.add_argument("--load-rate", type=float, default=5000.0,
                    help="background records/s while measuring alert latency under load")
    ap.add_argument("--templated", action="store_true",
                    help="every run is the same script (costly for near-duplicate-code)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    varied = not args.templated

    records = make_records(args.records, "bench", varied=varied)
    bodies = [encode(records[i:i + args.batch]) for i in range(0, len(records), args.batch)]
    background = make_records(100_000, "bg", seed=11, varied=varied)
    bg_bodies = [encode(background[i:i + args.batch])
                 for i in range(0, len(background), args.batch)]
    sample_bytes = sum(len(b) for b in bodies) / len(records)

    with tempfile.TemporaryDirectory(prefix="cellblock-bench-") as d:
        tmp = Path(d)
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        server = start_server(tmp, port)
        try:
            wall = ingest(url, bodies, args.clients)
            rate = len(records) / wall
            fast_catch, slow_catch = catch_up(url)
            idle = latency_idle(url, args.probes)
            loaded, bg_rate = latency_under_load(url, bg_bodies, args.batch, args.load_rate,
                                                 args.probes)
            metrics = requests.get(url + "/metrics", timeout=30).text
        finally:
            server.terminate()
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
        verify = subprocess.run([sys.executable, "-c", _CLI, "logs", "verify", "--db",
                                 str(tmp / "runs.db")], capture_output=True, text=True,
                                check=False, timeout=600)
        raw = baseline_raw_insert(records, args.batch, tmp)
        chain = baseline_store(records, args.batch, tmp)
        detect = baseline_engine(records[:20_000])

    ingested = next((line.split()[-1] for line in metrics.splitlines()
                     if line.startswith("cellblock_runs_ingested_total")), "?")
    result = {
        "workload": "varied" if varied else "templated",
        "records": args.records, "batch": args.batch, "clients": args.clients,
        "bytes_per_record": round(sample_bytes),
        "http_ingest_records_per_s": round(rate),
        "detection_catch_up_after_stream_s": {"first_worker": fast_catch,
                                              "all_workers": slow_catch},
        "alert_latency_idle_s": idle,
        "alert_latency_under_load_s": loaded,
        "background_rate": round(bg_rate),
        "baseline_raw_sqlalchemy_insert_per_s": round(raw),
        "baseline_store_append_per_s": round(chain),
        "baseline_detection_engine_per_s": round(detect),
        "server_ingested_total": ingested, "verify": verify.stdout.strip(),
    }
    if args.json:
        print(json.dumps(result))
        return
    print(f"cores: {os.cpu_count()}, python {sys.version.split()[0]}, workload: "
          f"{result['workload']}")
    print(f"records: {args.records} x ~{sample_bytes:.0f} B, batches of {args.batch}, "
          f"{args.clients} client threads")
    print(f"HTTP ingest into SQLite (chain; detection in workers): {rate:,.0f} records/s "
          f"({wall:.2f} s)")
    print(f"detection caught up after the stream: first worker {fast_catch:.2f} s, "
          f"both {slow_catch:.2f} s")
    print("alert latency, idle server:")
    for kind in KINDS:
        print(f"    {kind:20s} {fmt_ms(idle[kind])}")
    print(f"alert latency at {bg_rate:,.0f} records/s background:")
    for kind in KINDS:
        print(f"    {kind:20s} {fmt_ms(loaded[kind])}")
    print(f"baseline raw SQLAlchemy executemany (no chain):     {raw:,.0f} records/s")
    print(f"baseline Store.append (chain, no HTTP, no detection): {chain:,.0f} records/s")
    print(f"baseline detection engine alone (all detectors):  {detect:,.0f} records/s")
    print(f"logs verify: {verify.stdout.strip()}")


if __name__ == "__main__":
    main()
