"""Compaction as a Spark job: the driver plans and commits, one task per file-slice operation
merges the slice and writes its new base file on an executor.

The plan, the merge and the commit are :mod:`tidemark.table.compaction`'s own, so a compaction on
Spark equals one in a single process. A task that fails is retried by Spark; its new base file
has the same name in every attempt (the compaction's write token), so a retry replaces what a
failed attempt wrote and never leaves a second file. A driver that dies leaves the plan pending,
and the next ``compact`` finishes it first, as for the single-process path.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from pyspark.sql import SparkSession

from tidemark.errors import TidemarkError
from tidemark.spark.interrupts import spark_interrupts
from tidemark.spark.task_errors import failure_line, task_error
from tidemark.storage import S3Options, Storage, open_storage
from tidemark.table.compaction import (
    CompactedSlice,
    commit_compaction,
    compact,
    compact_slice,
    start_compaction,
)
from tidemark.table.concurrency import ConcurrencyConfig
from tidemark.table.file_system_view import CompactionOperation
from tidemark.table.snapshot import SnapshotReader
from tidemark.table.write_handles import ParquetConfig
from tidemark.timeline import Instant

#: how a task opens the table (a seam: tests hand in a storage that fails on cue); picklable
StorageFactory = Callable[[str, S3Options | None], Storage]


class CompactionFailedError(TidemarkError):
    """The compaction's Spark job failed for a reason of its own (a Python worker killed or out of
    memory, a task's unexpected error): the compaction is left pending, and the next compact
    finishes it (Hudi's HoodieCompactionException, "Could not compact")."""


@dataclass(frozen=True)
class _Task:
    location: str
    s3: S3Options | None
    compaction_instant: str
    open_table: StorageFactory
    parquet: ParquetConfig | None = None


@functools.lru_cache(maxsize=4)
def _reader(task: _Task) -> SnapshotReader:
    """One reader per compaction per Python worker (its timeline and view built once)."""
    return SnapshotReader(task.open_table(task.location, task.s3))


def _compact(task: _Task, op: CompactionOperation) -> CompactedSlice | None:
    return compact_slice(_reader(task), task.compaction_instant, op, task.parquet)


def run_compaction_on_spark(
    spark: SparkSession,
    storage: Storage,
    requested: Instant,
    location: str,
    s3: S3Options | None = None,
    open_table: StorageFactory = open_storage,
    parquet: ParquetConfig | None = None,
    config: ConcurrencyConfig | None = None,
) -> Instant:
    """Execute a scheduled compaction (resuming one left inflight) on Spark and commit it (under
    the table lock that ``config`` says)."""
    inflight, operations = start_compaction(storage, requested)
    if inflight.is_completed:  # by another process
        return inflight
    # a task that finds the compaction completed or rolled back by another process (this driver
    # stalled past its heartbeat's expiry) writes nothing and answers None: the commit then says which
    compacted: list[CompactedSlice | None] = []
    # a Ctrl-C cancels the merge's job, and the compaction is left pending, not committed
    with spark_interrupts(spark) as interrupts:
        if operations:
            task = _Task(location, s3, requested.timestamp, open_table, parquet)
            # one task per operation: a slice is the unit Spark retries
            rdd = spark.sparkContext.parallelize(operations, numSlices=len(operations))
            try:
                compacted = rdd.map(functools.partial(_compact, task)).collect()
            except Exception as e:  # a task's own error (a damaged file, named) is the one to tell
                # anything else in one line, not Spark's Python and Java traces (a Ctrl-C's
                # cancelled job is made the interrupt again by spark_interrupts)
                raise task_error(e, TidemarkError) or CompactionFailedError(
                    f"the compaction {requested.timestamp} on {storage.uri} failed and is left pending "
                    f"(`tidemark compact {storage.uri}` run again finishes it): {failure_line(e)}"
                ) from e
        interrupts.check()
    return commit_compaction(storage, requested, inflight, compacted, config)


def compact_on_spark(
    spark: SparkSession | None,
    location: str | os.PathLike[str],
    s3: S3Options | None = None,
    config: ConcurrencyConfig | None = None,
    open_table: StorageFactory = open_storage,
    master: str | None = None,
    parquet: ParquetConfig | None = None,
    spark_conf: Mapping[str, str] | None = None,
) -> Instant | None:
    """:func:`tidemark.table.compaction.compact` with every slice merged on Spark's executors:
    pending compactions finished first, then a new plan (under the table lock) run and committed.
    None when there is nothing to compact.

    Without ``spark``, a session (``master``, else ``spark_conf``'s ``spark.master``, else
    ``$TIDEMARK_SPARK_MASTER``, else ``local[2]``; ``spark_conf``'s ``spark.*`` keys set) is
    started only once there is a plan to run, and stopped at the end, unless one was running
    already; so a refusal or "nothing to compact" costs no Spark start."""
    location = os.fspath(location)  # a pathlib.Path, as open_storage takes it
    storage = open_table(location, s3)
    started: list[SparkSession] = []

    def session() -> SparkSession:
        if spark is not None:
            return spark
        if not started:
            running = SparkSession.getActiveSession()
            if running is not None:
                return running
            from tidemark.spark.session import local_session

            started.append(local_session(master, app_name="tidemark-compact", conf=spark_conf))
        return started[0]

    def run(table: Storage, requested: Instant) -> Instant:
        return run_compaction_on_spark(session(), table, requested, location, s3, open_table, parquet, config)

    try:
        return compact(storage, config, run)
    finally:
        for own in started:
            own.stop()
