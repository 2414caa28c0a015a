"""Faults in a Spark write, injected through the write job's hooks (:class:`WriteHooks`): task
attempts that die at a point or around log blocks, a speculative twin of a task, a driver that
dies before its commit. The hooks are pickled to Spark's executors, which import this module."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import sys
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
            # a speculative copy: the next attempt number, a task attempt id of its own
            twin = TaskContext(
                ctx.instant,
                ctx.partition_id,
                ctx.stage_id,
                ctx.attempt + 1,
                ctx.meta_fields,
                10_000 + (ctx.attempt_id or 0),
            )
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


class StorageGoneAway(WriteHooks):
    """The S3 endpoint goes away in the middle of the write: its server process (``pid``) is killed
    once a task has written its first file group, and stays away for the write's rollback too."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def task_point(self, point: str, attempt: int) -> None:
        import contextlib
        import signal

        if point == "after_file":
            with contextlib.suppress(ProcessLookupError):  # another task got there first
                os.kill(self.pid, signal.SIGKILL)


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
    """In a task's attempts below ``below``, the Python worker dies (``os._exit``) right after a
    new base file is written, before the task reports: Spark retries the task, and fails the job
    once it has no attempt left."""

    def __init__(self, inner: Storage, below: int = 1) -> None:
        super().__init__(inner)
        self.below = below

    def write(self, path: str, data: bytes) -> None:
        super().write(path, data)
        from pyspark import TaskContext as SparkTask

        task = SparkTask.get()
        if path.endswith(".parquet") and task is not None and task.attemptNumber() < self.below:
            os._exit(1)


def compaction_storage_killing_first_attempts(location: str, s3: S3Options | None = None) -> Storage:
    """A :data:`~tidemark.spark.compaction_job.StorageFactory` whose tasks' first attempts die
    after writing their base file (the driver's storage is the table's own)."""
    return _KillAfterBaseFile(open_storage(location, s3))


def compaction_storage_killing_every_attempt(location: str, s3: S3Options | None = None) -> Storage:
    """A :data:`~tidemark.spark.compaction_job.StorageFactory` whose tasks die after writing their
    base file at every attempt (a worker the OOM killer stops each time): the job fails."""
    return _KillAfterBaseFile(open_storage(location, s3), below=sys.maxsize)


class _TakenOverAfterBaseFile(FaultyStorage):
    """A task's storage: right after the first compacted base file any task writes, another
    process (run here, in the task's worker) takes the compaction over, its runner's heartbeat
    taken for expired, and completes it; what it committed is recorded in ``taken-over.json``
    beside the table (path → sha256, mtime_ns, inode). Each task's check of the timeline and its
    write happen under one lock, so no task writes between the other process's files and its
    commit (a race this test does not aim at)."""

    def __init__(self, inner: Storage, location: str) -> None:
        super().__init__(inner)
        self.location = location
        self._lock: int | None = None

    @property
    def record(self) -> str:
        return os.path.join(os.path.dirname(os.path.abspath(self.location)), "taken-over.json")

    def _release(self) -> None:
        if self._lock is not None:
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            os.close(self._lock)
            self._lock = None

    def exists(self, path: str) -> bool:
        there = super().exists(path)
        from pyspark import TaskContext as SparkTask

        if SparkTask.get() is None:  # the driver's storage
            return there
        if self._lock is None and path.startswith(".hoodie/") and path.endswith(".commit"):  # a task's check
            self._lock = os.open(self.record + ".lock", os.O_CREAT | os.O_RDWR)
            fcntl.flock(self._lock, fcntl.LOCK_EX)
            there = super().exists(path)
            if there:
                self._release()
        elif path.endswith(".compaction.inflight") and not there:
            self._release()
        return there

    def write(self, path: str, data: bytes) -> None:
        super().write(path, data)
        if not path.endswith(".parquet"):
            return
        try:
            if not os.path.exists(self.record):
                from tidemark.table.compaction import compact
                from tidemark.table.concurrency import ConcurrencyConfig

                impatient = ConcurrencyConfig(heartbeat_interval_ms=1, heartbeat_tolerable_misses=1)
                done = compact(open_storage(self.location), impatient)
                assert done is not None
                root = os.path.abspath(self.location)
                files = {}
                for folder, _, names in os.walk(root):
                    for name in names:
                        if name.endswith(f"_{done.timestamp}.parquet"):
                            full = os.path.join(folder, name)
                            with open(full, "rb") as f:
                                digest = hashlib.sha256(f.read()).hexdigest()
                            st = os.stat(full)
                            files[os.path.relpath(full, root)] = [digest, st.st_mtime_ns, st.st_ino]
                with open(self.record, "w") as f:
                    json.dump({"instant": done.timestamp, "files": files}, f)
        finally:
            self._release()


def compaction_storage_taken_over_after_first_base_file(location: str, s3: S3Options | None = None) -> Storage:
    """A :data:`~tidemark.spark.compaction_job.StorageFactory` whose first base file written is
    followed by another process's takeover and commit of the compaction."""
    return _TakenOverAfterBaseFile(open_storage(location, s3), location)
