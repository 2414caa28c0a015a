"""Faults in a Spark write, injected through the write job's hooks (:class:`WriteHooks`): task
attempts that die at a point or around log blocks, a speculative twin of a task, a driver that
dies before its commit. The hooks are pickled to Spark's executors, which import this module."""

from __future__ import annotations

import os
from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc

from tests.support.faults import FaultyStorage
from tidemark.logformat import LogWriter
from tidemark.spark.write_job import WriteHooks
from tidemark.storage import S3Options, Storage, open_storage
from tidemark.table.write_handles import BeforeAppend, TaskContext


class FailAt(WriteHooks):
    """Faults in a Spark write, at one point, for task attempts below ``below``:

    - ``before_write``, ``after_first_file``, ``after_all_files``: the attempt raises there;
    - ``before_first_block``, ``between_blocks`` (after the first block), ``mid_block`` (the first
      block whole, then half of the second): around the log blocks it appends;
    - ``speculative_copy``: every log append gets a twin from attempt + 1 that also completes,
      with other data (a non-deterministic input), whose status the driver never sees;
    - ``driver_before_commit``: the driver process dies (exit 137) before its commit.

    ``keep_unaccepted``: leave the files of attempts the commit did not accept in place (as Apache
    Hudi does for log files, or as a zombie attempt writing after the commit would)."""

    def __init__(self, point: str | None = None, below: int = 1, keep_unaccepted: bool = False) -> None:
        self.point = point
        self.below = below
        self.keep_unaccepted = keep_unaccepted

    def _due(self, point: str, attempt: int) -> bool:
        return self.point == point and attempt < self.below

    def task_point(self, point: str, attempt: int) -> None:
        # the job says after_file after each file group; the first one is what tests aim at
        name = "after_first_file" if point == "after_file" else point
        if self._due(name, attempt):
            raise RuntimeError(f"injected fault: failing task attempt {attempt} at {name}")

    def before_append(self, attempt: int) -> BeforeAppend | None:
        where = self.point
        if where not in ("before_first_block", "between_blocks", "mid_block") or attempt >= self.below:
            return None

        def fault(sequence: int, writer: LogWriter, encoded: bytes) -> None:
            if where == "before_first_block" or (where == "between_blocks" and sequence == 1):
                raise RuntimeError(f"injected fault: failing task attempt {attempt} at {where}")
            if where == "mid_block" and sequence == 1:
                part = writer.partition_path
                path = f"{part}/{writer.log_file.name}" if part else writer.log_file.name
                partial = encoded[: len(encoded) // 2]
                if writer.storage.exists(path):
                    writer.storage.append(path, partial)
                else:
                    writer.storage.write(path, partial)
                raise RuntimeError(f"injected fault: task attempt {attempt} died half-way through a block")

        return fault

    def after_log_file(
        self, ctx: TaskContext, data: pa.Table | None, append: Callable[[TaskContext, pa.Table | None], str]
    ) -> None:
        if self.point == "speculative_copy" and data is not None:
            twin = TaskContext(ctx.instant, ctx.partition_id, ctx.stage_id, ctx.attempt + 1)
            append(twin, _perturbed(data))

    def before_commit(self) -> None:
        if self.point == "driver_before_commit":
            os._exit(137)

    def keep_unaccepted_files(self) -> bool:
        return self.keep_unaccepted


def fail_at(spec: str, keep_unaccepted: bool = False) -> FailAt:
    """``"point"`` or ``"point:N"`` (attempts below N fail; 1 by default) as :class:`FailAt`."""
    point, _, below = spec.partition(":")
    return FailAt(point, int(below or "1"), keep_unaccepted)


class WriteOnAfterRollback(WriteHooks):
    """The task of the write stage's partition 0 fails at once on every attempt; every other task
    waits (up to ``wait_s``) until the table has no write pending, that is until the driver has
    rolled the failed write back, and then goes on to write its files: a task Spark has not yet
    stopped when the job failed, writing after the rollback read the markers."""

    def __init__(self, location: str, wait_s: float = 20.0) -> None:
        self.location = location
        self.wait_s = wait_s

    def task_point(self, point: str, attempt: int) -> None:
        import time

        from pyspark import TaskContext as SparkTask

        from tidemark.timeline import load_timeline

        task = SparkTask.get()
        if point != "before_write" or task is None:
            return
        if task.partitionId() == 0:
            raise RuntimeError(f"injected fault: failing task attempt {attempt} of partition 0")
        storage = open_storage(self.location)
        deadline = time.monotonic() + self.wait_s
        while load_timeline(storage).pending().write_instants().instants and time.monotonic() < deadline:
            time.sleep(0.05)


def _perturbed(table: pa.Table) -> pa.Table:
    for i, f in enumerate(table.schema):
        if pa.types.is_floating(f.type):
            table = table.set_column(i, f, pc.add(table.column(i), 1000.0))
    return table


class _KillAfterBaseFile(FaultyStorage):
    """In a task's first attempt, the Python worker dies (``os._exit``) right after a new base
    file is written, before the task reports: Spark retries the task."""

    def write(self, path: str, data: bytes) -> None:
        super().write(path, data)
        from pyspark import TaskContext as SparkTask

        task = SparkTask.get()
        if path.endswith(".parquet") and task is not None and task.attemptNumber() == 0:
            os._exit(1)


def compaction_storage_killing_first_attempts(location: str, s3: S3Options | None = None) -> Storage:
    """A :data:`~tidemark.spark.compaction_job.StorageFactory` whose tasks' first attempts die
    after writing their base file (the driver's storage is the table's own)."""
    return _KillAfterBaseFile(open_storage(location, s3))
