"""The event-driven demo behind ``make demo``: a Kafka-protocol broker (tansu), the cleaner and the
archiver as processes, and the operator against a Kubernetes API emulator (kmock, the one the
operator's tests use; there is no cluster here) with one ``HudiTable``. A table written through
local Spark publishes an event per commit; the services react, and the demo prints the events as
they flow and what changed on storage, and the table's status as the operator reads it.

Usage: python scripts/demo_services.py [OUTPUT_DIR]   (default: demo-output/services)
"""

from __future__ import annotations

import shutil
import sys
import threading
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from _demo import Processes, accepts, free_port, step, wait_for
from tidemark.errors import EventDecodeError
from tidemark.events import EventType, TimelineEvent, decode
from tidemark.kafka_adapter import EventConsumer, ensure_topics
from tidemark.spark.session import local_session
from tidemark.spark.write_job import WriteOptions, write_dataframe
from tidemark.storage import LocalStorage
from tidemark.timeline import load_timeline
from tidemark.timeline.archived import read_archived

ROOT = Path(__file__).resolve().parent.parent
CITIES = ["san_francisco", "sao_paulo", "chennai"]
TOPIC = "tidemark.timeline"
#: small enough for a few commits to be cleaned and archived
SERVICE_CONF = {
    "hoodie.cleaner.commits.retained": "2",
    "hoodie.clean.max.commits": "3",
    "hoodie.keep.min.commits": "2",
    "hoodie.keep.max.commits": "3",
}
TABLES = "/apis/tidemark.io/v1alpha1/namespaces/default/huditables"


def trips(keys: range, ts: int, fare: float) -> list[dict[str, Any]]:
    return [{"uuid": f"trip-{k}", "ts": ts, "fare": fare + k, "city": CITIES[k % 3]} for k in keys]


class EventPrinter:
    """Reads the timeline topic from a thread and prints each event as it arrives."""

    def __init__(self, bootstrap: str) -> None:
        self.events: list[TimelineEvent] = []
        self._stop = threading.Event()
        self._consumer = EventConsumer(bootstrap, [TOPIC], f"demo-{uuid.uuid4().hex[:8]}")
        self._thread = threading.Thread(target=self._run, name="events", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for m in self._consumer.poll(0.5):
                try:
                    event = decode(m.key, m.value, m.headers)
                except EventDecodeError:
                    continue
                self.events.append(event)
                shown = {k: v for k, v in event.extra.items() if k in ("filesDeleted", "instantsArchived", "resource")}
                print(f"   event  {event.type:<28} {event.instant}  from {event.source}  {shown or ''}", flush=True)
        self._consumer.close()

    def of(self, kind: EventType) -> list[TimelineEvent]:
        return [e for e in self.events if e.type is kind]

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def metric(port: int, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


def data_files(storage: LocalStorage) -> set[str]:
    return {i.path for i in storage.list() if not i.path.startswith(".hoodie/")}


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "demo-output/services").resolve()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    path = out / "trips"
    storage = LocalStorage(path)
    with Processes(out) as procs:
        step("1. A Kafka-protocol broker (tansu), the cleaner and the archiver, started here")
        bootstrap = procs.broker()
        ensure_topics(bootstrap, [TOPIC, f"{TOPIC}.dead-letter"])
        ports = {}
        for name in ("cleaner", "archiver"):
            ports[name] = free_port()
            command = [procs.console_script(f"tidemark-{name}"), "--bootstrap", bootstrap, "--topic", TOPIC]
            command += ["--metrics-port", str(ports[name])]
            command += [arg for key, value in SERVICE_CONF.items() for arg in ("--conf", f"{key}={value}")]
            procs.start(name, command)
        wait_for(lambda: all(accepts(p) for p in ports.values()), "the services' /healthz")
        print(f"   broker on {bootstrap}; cleaner metrics on :{ports['cleaner']}, archiver on :{ports['archiver']}")
        printer = EventPrinter(bootstrap)

        step("2. A table written through local Spark, an event per commit (tidemark.events.bootstrap)")
        spark = local_session("local[2]", "tidemark-demo-services")
        spark.sparkContext.setLogLevel("ERROR")
        conf = {"tidemark.events.bootstrap": bootstrap, "tidemark.events.topic": TOPIC}

        def write(operation: str, rows: list[dict[str, Any]]) -> None:
            options = WriteOptions(
                operation=operation,
                record_key=("uuid",),
                precombine="ts",
                partition_fields=("city",),
                hive_style=True,
                conf=conf,
            )
            write_dataframe(spark.createDataFrame(rows), str(path), options)
            print(f"   {operation}: {len(rows)} trips", flush=True)

        write("insert", trips(range(30), 1, 10.0))
        write("upsert", trips(range(0, 30, 3), 2, 20.0))
        before = data_files(storage)
        # replaces every file group of the cities it writes: the next clean deletes the old ones
        write("insert_overwrite", trips(range(30), 3, 30.0))
        for ts in (4, 5, 6):
            write("upsert", trips(range(ts, 30, 4), ts, 10.0 * ts))
        spark.stop()

        step("3. The services react: a clean on Hudi's trigger, then an archival after it")
        wait_for(lambda: printer.of(EventType.CLEAN_COMPLETED), "clean.completed", 120)
        wait_for(lambda: printer.of(EventType.ARCHIVE_COMPLETED), "archive.completed", 120)
        after = data_files(storage)
        deleted = sorted(before - after)
        print(f"   the cleaner deleted {len(deleted)} files of the replaced file groups, e.g. {deleted[0]}")
        archived = {a.timestamp for a in read_archived(storage)}
        print(
            f"   the archiver moved {len(archived)} instants to .hoodie/archived/; "
            f"{len(load_timeline(storage))} remain on the active timeline"
        )
        print(f"   tidemark_clean_files_deleted_total {metric(ports['cleaner'], 'tidemark_clean_files_deleted_total')}")
        print(f"   tidemark_archive_instants_total {metric(ports['archiver'], 'tidemark_archive_instants_total')}")

        step("4. The operator, with one HudiTable: it requests cleans on the table's schedule")
        sys.path.insert(0, str(ROOT))  # the Kubernetes API emulator the operator's tests run against
        from tests.support.kube import KubeApi

        kube = KubeApi()
        try:
            operator_port = free_port()
            command = [procs.console_script("tidemark-operator"), "--kube-server", kube.url, "--all-namespaces"]
            command += ["--bootstrap", bootstrap, "--topic", TOPIC, "--tick", "1", "--refresh", "2"]
            command += ["--metrics-port", str(operator_port)]
            procs.start("operator", command)
            resource = {
                "apiVersion": "tidemark.io/v1alpha1",
                "kind": "HudiTable",
                "metadata": {"name": "trips", "namespace": "default"},
                "spec": {"location": str(path), "clean": {"interval": "5s", "commitsRetained": 1}},
            }
            kube.create(TABLES, resource)
            print(f"   kubectl apply: HudiTable default/trips, location {path}, clean every 5 s")
            requested = wait_for(lambda: printer.of(EventType.CLEAN_REQUESTED), "the operator's request", 120)[0]

            def answered() -> str | None:
                later = [e.instant for e in printer.of(EventType.CLEAN_COMPLETED) if e.instant > requested.instant]
                return later[0] if later else None

            done = wait_for(answered, "the cleaner's answer to the operator's request", 120)

            def status() -> dict[str, Any]:
                return dict((kube.get(f"{TABLES}/trips") or {}).get("status") or {})

            wait_for(lambda: (status().get("lastClean") or {}).get("instant") == done, "the status to show it", 60)
            shown = status()
            print(f"   status.phase: {shown.get('phase')}")
            print(f"   status.lastClean: {shown.get('lastClean')}")
            print(f"   status.activeTimelineLength: {shown.get('activeTimelineLength')}")
            print(f"   status.nextScheduled: {shown.get('nextScheduled')}")
        finally:
            kube.close()
        printer.close()
        print(f"\n   logs of every process are in {out}")


if __name__ == "__main__":
    main()
