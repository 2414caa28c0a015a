"""The writer-coordinator: markers over HTTP batched into ``MARKERS<N>`` files, early conflict
checks against its in-memory index, and the rebuild of that index when it restarts.

The coordinator runs in this process (``Coordinator`` + ``make_server`` on a thread, no Kafka).

1. Markers of one write of 10,000 data files from 8 concurrent tasks through the coordinator
   (each task its own ``CoordinatorClient``), against direct markers (``create_marker``, one
   conditional PUT each) from 8 threads, both on a moto S3 server over HTTP; every marker is then
   listed back with ``list_markers``.
2. One early conflict check of one file group by a later write that conflicts with nobody,
   against 100,000 live markers of 10 other writes (local storage): ``POST /v1/conflicts/check``
   against ``EarlyConflictDetector.check`` on the same table (direct marker files, which the
   coordinator rebuilt its index from), and against RFC-56's 179 ms for 1,500 markers.
3. A coordinator restart: ``TableState.load`` of 100,000 markers in ``MARKERS<N>`` files written by
   the coordinator's own batching, against listing the same markers once with ``list_markers``.
"""

from __future__ import annotations

import argparse
import gc
import logging
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from http.server import ThreadingHTTPServer
from pathlib import Path

from prometheus_client import Histogram

from benchmarks.common import (
    DATA_DIR,
    Result,
    best_of_alternating,
    percentile,
    print_table,
    ratio_text,
    start_moto,
    write_json,
)
from tidemark.bulk import collector_paused
from tidemark.errors import CoordinatorError, WriteConflictError
from tidemark.storage import LocalStorage, S3Options, Storage, open_storage
from tidemark.table.concurrency import ConcurrencyConfig
from tidemark.table.conflict import EarlyConflictDetector, file_group
from tidemark.table.coordinator_client import CoordinatorClient
from tidemark.table.markers import TEMP_FOLDER, IOType, Marker, create_marker, list_markers, read_marker_files
from tidemark.table.write_client import PendingWrite, begin_write, create_table
from tidemark.timeline import DELTA_COMMIT
from tidemark_services.coordinator_state import MARKERS_PER_FILE, TableState
from tidemark_services.writer_coordinator import Coordinator, CoordinatorMetrics, CoordinatorSettings, make_server

#: RFC-56's own measurement of an early check that lists markers: 1,500 markers in 20 files
RFC_56_MS = 179.0
#: writers whose heartbeat files stay fresh for an hour: live for the whole run
LIVE = ConcurrencyConfig(heartbeat_interval_ms=3_600_000, early_detection=True)
#: a request that failed (connection refused or reset, a 503) is sent again, at most this often
RETRIES = 5


@dataclass(frozen=True)
class Config:
    s3_markers: int
    clients: int
    partitions: int
    live_markers: int
    writers: int
    checks: int
    restart_markers: int
    restart_reps: int
    quick: bool


class _Running:
    """A coordinator served over HTTP on a free local port, as ``tidemark-writer-coordinator``
    runs it minus Kafka (``coordinator.events`` stays None)."""

    def __init__(self, s3: S3Options) -> None:
        self.coordinator = Coordinator(CoordinatorSettings(), s3, CoordinatorMetrics("writer-coordinator"))
        self.coordinator.start()
        self.server: ThreadingHTTPServer = make_server(self.coordinator, "127.0.0.1", 0)
        self.thread = threading.Thread(target=self.server.serve_forever, name="http", daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.coordinator.stop()


def _live_writes(storage: Storage, count: int) -> list[PendingWrite]:
    """``count`` pending writes whose heartbeats stay fresh (the beating thread stopped, the file
    kept): live to every reader for the next hour."""
    writes = []
    for _ in range(count):
        w = begin_write(storage, DELTA_COMMIT, "upsert", LIVE)
        w.heartbeat.stop(delete=False)
        writes.append(w)
    return writes


# --- 1. markers of one write, through the coordinator and direct, on moto S3 ---------------------


def _data_files(instant: str, side: int, cfg: Config) -> list[list[str]]:
    """The data files each of ``cfg.clients`` tasks writes: distinct new base files (CREATE)."""
    files: list[list[str]] = [[] for _ in range(cfg.clients)]
    for i in range(cfg.s3_markers):
        task = i % cfg.clients
        file_id = f"{side:04d}{i:08d}-aaaa-bbbb-cccc-dddddddddddd-0"
        files[task].append(f"p={i % cfg.partitions}/{file_id}_{task}-1-0_{instant}.parquet")
    return files


def _sample(metric: Histogram, suffix: str) -> float:
    """The ``_count`` or ``_sum`` of a Prometheus histogram."""
    return next(s.value for m in metric.collect() for s in m.samples if s.name.endswith(suffix))


def _listen_overflows() -> int | None:
    """Linux's count of connections dropped because a listening socket's accept queue was full
    (``TcpExt: ListenOverflows``, the whole machine); None elsewhere."""
    try:
        lines = Path("/proc/net/netstat").read_text().splitlines()
    except OSError:
        return None
    for keys, values in zip(lines[::2], lines[1::2], strict=False):
        if keys.startswith("TcpExt:"):
            found = dict(zip(keys.split(), values.split(), strict=False))
            return int(found["ListenOverflows"]) if "ListenOverflows" in found else None
    return None


def _concurrently(tasks: list[Callable[[], list[float]]]) -> tuple[float, list[float]]:
    """Run every task on its own thread; wall seconds and every latency the tasks measured."""
    latencies: list[list[float]] = [[] for _ in tasks]
    errors: list[BaseException] = []

    def run(n: int) -> None:
        try:
            latencies[n] = tasks[n]()
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=run, args=(n,), name=f"task-{n}") for n in range(len(tasks))]
    gc.collect()
    with collector_paused():
        started = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - started
    if errors:
        raise errors[0]
    return elapsed, [x for task in latencies for x in task]


def bench_markers_s3(cfg: Config, endpoint: str, declared: bool) -> Result:
    """``declared``: each task declares all its new base files in one request, as the write job's
    insert tasks do; otherwise one request per marker, as for log files."""
    location = f"s3://bench/markers-{'declared' if declared else 'each'}"
    s3 = S3Options(endpoint_url=endpoint, region="us-east-1")
    storage = open_storage(location, s3)
    create_table(storage, "bench", ["id"], None, ["p"], True)
    via, direct = _live_writes(storage, 2)
    running = _Running(S3Options(endpoint_url=endpoint))
    retried = [0]
    retried_mutex = threading.Lock()
    try:
        driver = CoordinatorClient(running.url, location)
        driver.register(via.start, LIVE)  # the driver registers its write; its tasks send markers

        def through_coordinator(paths: list[str]) -> Callable[[], list[float]]:
            def task() -> list[float]:
                client = CoordinatorClient(running.url, location)
                times = []
                requests = [paths] if declared else [[p] for p in paths]
                for request in requests:
                    markers = [Marker(via.instant, path, IOType.CREATE) for path in request]
                    t0 = time.perf_counter()
                    for attempt in range(RETRIES + 1):
                        try:
                            # answered once its batch is on storage
                            if declared:
                                client.create_markers(via.instant, markers)
                            else:
                                client.create_marker(markers[0])
                            break
                        except CoordinatorError:
                            # a real task would fall back to direct markers for the rest of its run;
                            # sent again here so every marker goes through the coordinator
                            with retried_mutex:
                                retried[0] += 1
                            if attempt == RETRIES:
                                raise
                    times.append(time.perf_counter() - t0)
                return times

            return task

        def direct_markers(paths: list[str]) -> Callable[[], list[float]]:
            def task() -> list[float]:
                times = []
                for path in paths:
                    t0 = time.perf_counter()
                    create_marker(storage, direct.instant, path, IOType.CREATE)
                    times.append(time.perf_counter() - t0)
                return times

            return task

        overflows = _listen_overflows()
        t_sec, t_lat = _concurrently([through_coordinator(p) for p in _data_files(via.instant, 1, cfg)])
        overflowed = None if overflows is None else (_listen_overflows() or 0) - overflows
        a_sec, a_lat = _concurrently([direct_markers(p) for p in _data_files(direct.instant, 2, cfg)])
        metrics = running.coordinator.metrics
        batch_count = _sample(metrics.batch_size, "_count")
        batch_seconds = _sample(metrics.batch_latency, "_sum")
    finally:
        running.close()
    # markers that were lost would make the figure meaningless: every one is listed back
    listed_via = list_markers(storage, via.instant)
    listed_direct = list_markers(storage, direct.instant)
    assert len(listed_via) == cfg.s3_markers, (len(listed_via), cfg.s3_markers)
    assert len(listed_direct) == cfg.s3_markers, (len(listed_direct), cfg.s3_markers)
    marker_files = sorted(read_marker_files(storage, via.instant))
    t_rate, a_rate = cfg.s3_markers / t_sec, cfg.s3_markers / a_sec
    how = "each task's in one request" if declared else "one per request"
    return Result(
        f"1{'a' if declared else 'b'}. markers of one write, {cfg.s3_markers:,} files from {cfg.clients} tasks, "
        f"{how}, moto S3",
        "speedup >= 10x",
        f"POST /v1/markers/create from {cfg.clients} clients, {how} (wall time)",
        t_sec,
        f"direct create_marker from {cfg.clients} threads (wall time)",
        a_sec,
        "s",
        a_sec / t_sec,
        10.0,
        {
            "markers": cfg.s3_markers,
            "clients": cfg.clients,
            "coordinator_markers_per_s": t_rate,
            "direct_markers_per_s": a_rate,
            "p50_s": statistics.median(t_lat),
            "p99_s": percentile(t_lat, 0.99),
            "max_s": max(t_lat),
            "direct_p50_s": statistics.median(a_lat),
            "direct_p99_s": percentile(a_lat, 0.99),
            "requests_over_900ms": sum(1 for x in t_lat if x > 0.9),
            "requests_retried": retried[0],
            "listen_overflows": overflowed,
            "batches": int(batch_count),
            "markers_per_batch": cfg.s3_markers / batch_count if batch_count else 0.0,
            "batch_write_s_total": batch_seconds,
            "markers_files": [f"MARKERS{n}" for n in marker_files],
            "listed_coordinator": len(listed_via),
            "listed_direct": len(listed_direct),
        },
    )


# --- 2. one early conflict check against 100,000 live markers ------------------------------------


def _direct_marker_table(root: Path, cfg: Config) -> tuple[LocalStorage, list[PendingWrite]]:
    """``cfg.writers`` live pending writes with ``cfg.live_markers`` direct marker files in all,
    spread over ``cfg.partitions`` partitions; half new base files, half log files."""
    storage = LocalStorage(root)
    create_table(storage, "bench", ["id"], None, ["p"], True)
    writers = _live_writes(storage, cfg.writers)
    per_writer = cfg.live_markers // cfg.writers
    for n, w in enumerate(writers):
        for i in range(per_writer):
            partition = f"p={i % cfg.partitions}"
            folder = root / TEMP_FOLDER / w.instant / partition
            if i < cfg.partitions:
                folder.mkdir(parents=True, exist_ok=True)
            file_id = f"{n:04d}{i:08d}-aaaa-bbbb-cccc-dddddddddddd-0"
            name = (
                f".{file_id}_{w.instant}.log.1_0-1-0.marker.APPEND"
                if i % 2
                else f"{file_id}_0-1-0_{w.instant}.parquet.marker.CREATE"
            )
            (folder / name).touch()
    return storage, writers


def bench_check(cfg: Config, work: Path) -> list[Result]:
    root = work / "check"
    storage, writers = _direct_marker_table(root, cfg)
    location = str(root)
    checker, loser = _live_writes(storage, 2)  # later than every writer above
    group = [file_group("p=0", "ffffffff-aaaa-bbbb-cccc-dddddddddddd-0")]  # nobody else's
    taken = [file_group("p=0", "000000000000-aaaa-bbbb-cccc-dddddddddddd-0")]  # the first writer's
    running = _Running(S3Options())
    try:
        client = CoordinatorClient(running.url, location)
        t0 = time.perf_counter()
        client.register(checker.start, LIVE)  # the first request: the index is rebuilt from storage
        load_s = time.perf_counter() - t0
        for w in writers:  # their drivers renew through the coordinator, as after its restart
            client.register(w.start, LIVE, renew=True)
        state = running.coordinator.tables[location]
        indexed = state.marker_count()
        assert indexed == cfg.live_markers - cfg.live_markers % cfg.writers, indexed
        client.check(checker.instant, group)  # the first connection, untimed

        coordinator_times: list[float] = []
        in_process: list[float] = []
        direct_times: list[float] = []
        detector_config = ConcurrencyConfig(heartbeat_interval_ms=3_600_000, early_detection=True)
        gc.collect()
        with collector_paused():
            for _ in range(cfg.checks):  # alternating, so a burst of noise hits both
                t0 = time.perf_counter()
                found = client.check(checker.instant, group)
                coordinator_times.append(time.perf_counter() - t0)
                assert found is None, found
                t0 = time.perf_counter()
                conflict, _ = state.check(checker.instant, group)
                in_process.append(time.perf_counter() - t0)
                assert conflict is None, conflict
                detector = EarlyConflictDetector(storage, detector_config, checker.start)  # a new task
                t0 = time.perf_counter()
                detector.check(group)
                direct_times.append(time.perf_counter() - t0)
        # a check that must find the conflict finds it, both ways (the index really holds them)
        assert client.check(loser.instant, taken) is not None
        try:
            EarlyConflictDetector(storage, detector_config, loser.start).check(taken)
            raise AssertionError("the direct check found no conflict with the first writer")
        except WriteConflictError:
            pass
    finally:
        running.close()
    p50, p99 = statistics.median(coordinator_times), percentile(coordinator_times, 0.99)
    d50, d99 = statistics.median(direct_times), percentile(direct_times, 0.99)
    details = {
        "p50_s": p50,
        "p99_s": p99,
        "direct_p50_s": d50,
        "direct_p99_s": d99,
        "in_process_p50_s": statistics.median(in_process),
        "in_process_p99_s": percentile(in_process, 0.99),
        "checks": cfg.checks,
        "live_markers": indexed,
        "writers": cfg.writers,
        "markers_loaded_by": "TableState.load from direct marker files (first request)",
        "state_rebuild_s": load_s,
        "rfc56_anchor_ms_for_1500_markers": RFC_56_MS,
    }
    name = f"2{{}}. early check, {indexed:,} live markers of {cfg.writers} writes, p99"
    return [
        Result(
            name.format("a"),
            "p99 <= 5 ms",
            "POST /v1/conflicts/check of one file group (p99)",
            p99,
            "EarlyConflictDetector.check, direct markers (p99)",
            d99,
            "s",
            p99 / d99,
            0.005 / d99,
            details,
            lower_is_better=True,
        ),
        Result(
            name.format("b"),
            "p99 <= 5 ms",
            "POST /v1/conflicts/check of one file group (p99)",
            p99,
            "RFC-56: 179 ms for 1,500 markers (a constant)",
            RFC_56_MS / 1000,
            "s",
            p99 / (RFC_56_MS / 1000),
            0.005 / (RFC_56_MS / 1000),
            details,
            lower_is_better=True,
        ),
    ]


# --- 3. a restart: the index rebuilt from MARKERS<N> files ---------------------------------------


def bench_restart(cfg: Config, work: Path) -> Result:
    root = work / "restart"
    storage = LocalStorage(root)
    create_table(storage, "bench", ["id"], None, ["p"], True)
    writers = _live_writes(storage, cfg.writers)
    location = str(root)
    # the MARKERS<N> files written as the coordinator writes them: its own state and batches
    writer_state = TableState(location, storage, LIVE)
    per_writer = cfg.restart_markers // cfg.writers
    for n, w in enumerate(writers):
        for i in range(per_writer):
            file_id = f"{n:04d}{i:08d}-aaaa-bbbb-cccc-dddddddddddd-0"
            path = (
                f"p={i % cfg.partitions}/.{file_id}_{w.instant}.log.1_0-1-0"
                if i % 2
                else f"p={i % cfg.partitions}/{file_id}_0-1-0_{w.instant}.parquet"
            )
            result, conflict, _ = writer_state.create_marker(
                Marker(w.instant, path, IOType.APPEND if i % 2 else IOType.CREATE)
            )
            assert conflict is None, conflict
            assert result is not None
            assert result.created
    with ThreadPoolExecutor(CoordinatorSettings().batch_threads) as pool:
        batch, count = writer_state.flush(pool)
    assert batch.error is None, batch.error
    assert count == per_writer * cfg.writers, count
    files = sum(len(read_marker_files(storage, w.instant)) for w in writers)
    expected = per_writer * cfg.writers
    config = CoordinatorSettings().concurrency

    def load() -> int:
        return TableState.load(location, storage, config).marker_count()

    def listing() -> int:
        return sum(len(list_markers(storage, w.instant)) for w in writers)

    t_sec, a_sec, n_t, n_a = best_of_alternating(load, listing, cfg.restart_reps)
    assert n_t == expected, (n_t, expected)
    assert n_a == expected, (n_a, expected)
    return Result(
        f"3. restart: index rebuilt from {expected:,} markers in {files} MARKERS files",
        "reported",
        "TableState.load (best of N)",
        t_sec,
        "list_markers of every write once (best of N)",
        a_sec,
        "s",
        t_sec / a_sec,
        float("inf"),
        {
            "load_s": t_sec,
            "list_s": a_sec,
            "markers": expected,
            "markers_files": files,
            "markers_per_file": MARKERS_PER_FILE,
            "reps": cfg.restart_reps,
            "load_markers_per_s": expected / t_sec,
        },
        lower_is_better=True,
    )


# --- the run -------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--output", type=Path, default=DATA_DIR / "results-coordinator.json")
    args = parser.parse_args(argv)
    cfg = Config(
        s3_markers=1_000 if args.quick else 10_000,
        clients=8,
        partitions=100,
        live_markers=10_000 if args.quick else 100_000,
        writers=10,
        checks=200,
        restart_markers=10_000 if args.quick else 100_000,
        restart_reps=3 if args.quick else 5,
        quick=args.quick,
    )
    print(
        f"tidemark writer-coordinator benchmarks: {cfg.s3_markers:,} markers on moto S3, "
        f"{cfg.live_markers:,} live markers, {cfg.restart_markers:,} on restart",
        flush=True,
    )
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    work = Path(tempfile.mkdtemp(prefix="tidemark-bench-coordinator-"))
    results: list[Result] = []
    try:
        server, endpoint = start_moto()
        try:
            for declared in (True, False):
                results.append(bench_markers_s3(cfg, endpoint, declared))
                print(f"  done: {results[-1].name} ({ratio_text(results[-1])})", flush=True)
        finally:
            server.stop()  # type: ignore[attr-defined]
        for r in bench_check(cfg, work):
            results.append(r)
            print(f"  done: {r.name} ({ratio_text(r)})", flush=True)
        results.append(bench_restart(cfg, work))
        print(f"  done: {results[-1].name} ({ratio_text(results[-1])})", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print()
    print_table(results)
    check = results[2].details
    for label, first in (("1a", results[0].details), ("1b", results[1].details)):
        print(
            f"{label}: {first['coordinator_markers_per_s']:,.0f} markers/s through the coordinator "
            f"({first['markers_per_batch']:.1f} per batch, {first['batches']} batches), "
            f"{first['direct_markers_per_s']:,.0f} markers/s direct; per request p50 "
            f"{first['p50_s'] * 1000:.1f} ms, p99 {first['p99_s'] * 1000:.1f} ms (direct, per marker: p50 "
            f"{first['direct_p50_s'] * 1000:.1f} ms, p99 {first['direct_p99_s'] * 1000:.1f} ms); "
            f"{first['requests_over_900ms']} requests took over 0.9 s, {first['requests_retried']} were sent "
            f"again; connections dropped at a full accept queue (Linux, whole machine): {first['listen_overflows']}"
        )
    print(
        f"2: over HTTP p50 {check['p50_s'] * 1000:.2f} ms, p99 {check['p99_s'] * 1000:.2f} ms; in-process "
        f"p50 {check['in_process_p50_s'] * 1e6:.1f} us, p99 {check['in_process_p99_s'] * 1e6:.1f} us; direct "
        f"p50 {check['direct_p50_s'] * 1000:.2f} ms, p99 {check['direct_p99_s'] * 1000:.2f} ms; RFC-56 anchor "
        f"{RFC_56_MS:.0f} ms for 1,500 markers; the index was rebuilt from storage in {check['state_rebuild_s']:.2f} s"
    )
    write_json("coordinator", results, asdict(cfg), {}, args.output)
    print(f"\nresults written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
