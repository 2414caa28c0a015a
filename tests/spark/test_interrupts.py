"""A Ctrl-C while the driver waits on Spark's JVM. PySpark's own SIGINT handler sent its cancel
over the very connection the wait held: py4j failed it ("reentrant call"), and the job ran on
(a write's tasks went on writing, and the write now and then committed after the Ctrl-C)."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from tidemark.errors import Terminated, raise_terminated
from tidemark.spark.interrupts import spark_interrupts

pytestmark = pytest.mark.spark


def _slow(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        time.sleep(60)
        yield batch


def _a_slow_job_stopped_by(spark: SparkSession, signum: int, raised: type[BaseException]) -> None:
    """A job of a minute, with ``signum`` sent to this process 3 s in: ``raised`` comes at once,
    and the job is cancelled."""
    slow = spark.range(2, numPartitions=2).mapInArrow(_slow, "id long")
    threading.Timer(3.0, os.kill, (os.getpid(), signum)).start()
    started = time.monotonic()
    with pytest.raises(raised), spark_interrupts(spark):
        slow.count()  # the job runs within the py4j call
    assert time.monotonic() - started < 45  # not the job's 60 s
    tracker = spark.sparkContext.statusTracker()
    deadline = time.monotonic() + 20
    while tracker.getActiveJobsIds():  # the cancel takes a moment to reach the status store
        assert time.monotonic() < deadline, "the job runs on"
        time.sleep(0.1)


def test_a_ctrl_c_while_the_driver_waits_on_the_jvm_cancels_the_job(spark: SparkSession) -> None:
    before = signal.getsignal(signal.SIGINT)
    _a_slow_job_stopped_by(spark, signal.SIGINT, KeyboardInterrupt)
    assert spark.range(3).count() == 3  # the driver's connection to the JVM still works
    assert signal.getsignal(signal.SIGINT) == before  # PySpark's again


def test_a_ctrl_c_once_the_commit_has_begun_is_only_recorded(spark: SparkSession) -> None:
    # raised half-way through a commit, it left the write committed while the command said it
    # was rolled back, and the table lock held
    with spark_interrupts(spark) as interrupts:
        with interrupts.committing():
            signal.raise_signal(signal.SIGINT)
            time.sleep(0.1)  # the handler runs between bytecodes: it has by now
        assert interrupts.late
        assert not interrupts.requested
    with spark_interrupts(spark) as interrupts:
        with contextlib.suppress(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)  # outside a call to the JVM: raised at once
        with interrupts.committing(), pytest.raises(KeyboardInterrupt):
            interrupts.check()  # one that came before the commit still stops it
        interrupts.requested = False  # told: the block's end need not raise it again
    assert spark.range(3).count() == 3


def test_a_ctrl_c_after_a_commit_is_only_recorded_and_one_after_a_failed_commit_stops(spark: SparkSession) -> None:
    # between a commit and the block's end (the write's result returned, then printed), a Ctrl-C
    # raised there made the command say its committed write was rolled back
    with spark_interrupts(spark) as interrupts:
        with interrupts.committing():
            pass  # committed
        signal.raise_signal(signal.SIGINT)
        time.sleep(0.1)
        assert interrupts.late
        assert not interrupts.requested
    with spark_interrupts(spark) as interrupts:
        with contextlib.suppress(RuntimeError), interrupts.committing():
            raise RuntimeError("the commit failed")  # the write is rolled back: a Ctrl-C stops what follows
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)  # outside a call to the JVM: raised at once
        interrupts.requested = False
    assert spark.range(3).count() == 3


def test_a_sigterm_the_command_takes_as_a_ctrl_c_cancels_the_job_as_one(spark: SparkSession) -> None:
    # Kubernetes stops a pod with SIGTERM: the write's job ran on, and its rollback never came
    before = signal.signal(signal.SIGTERM, raise_terminated)  # as the tidemark command has it
    try:
        _a_slow_job_stopped_by(spark, signal.SIGTERM, Terminated)
        assert signal.getsignal(signal.SIGTERM) is raise_terminated
        with spark_interrupts(spark) as interrupts:
            with interrupts.committing():
                signal.raise_signal(signal.SIGTERM)
                time.sleep(0.1)
            assert interrupts.late  # once the commit has begun, recorded only
            assert interrupts.signal_name == "SIGTERM"
        assert spark.range(3).count() == 3
    finally:
        signal.signal(signal.SIGTERM, before)


@pytest.mark.parametrize("closed", ["before the task", "mid-handshake"])
def test_a_worker_whose_task_was_cancelled_before_it_began_prints_no_traceback(
    spark: SparkSession, closed: str
) -> None:
    """A Ctrl-C that cancels the jobs as a Python worker starts: Spark closes the worker's
    connection before the task's first byte, and PySpark's daemon printed that worker's EOFError
    traceback under the command's one-line message. The session's daemon, run as Spark runs it."""
    import socket
    import struct
    import subprocess
    import sys

    module = spark.sparkContext.getConf().get("spark.python.daemon.module", "pyspark.daemon")
    env = {**os.environ, "PYTHON_WORKER_FACTORY_SECRET": "s3cret", "SPARK_REUSE_WORKER": "1"}
    daemon = subprocess.Popen(
        [sys.executable, "-m", str(module)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert daemon.stdout is not None
    assert daemon.stdin is not None
    assert daemon.stderr is not None
    (port,) = struct.unpack("!i", daemon.stdout.read(4))
    with socket.create_connection(("127.0.0.1", port), timeout=30) as connection:
        assert len(connection.recv(4)) == 4  # the forked worker's pid: it waits for the secret
        if closed == "mid-handshake":
            connection.sendall(struct.pack("!i", len("s3cret")) + b"s3")
    time.sleep(1)  # the worker reads the end of its connection
    daemon.stdin.close()  # as Spark's JVM ends it
    daemon.wait(timeout=30)
    err = daemon.stderr.read()
    assert b"Traceback" not in err, err.decode()
