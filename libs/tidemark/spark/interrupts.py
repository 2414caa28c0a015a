"""Ctrl-C while the driver runs Spark jobs.

PySpark's own SIGINT handler calls ``cancelAllJobs`` over py4j from inside whatever the main
thread was doing. When that was a call into the JVM, the handler's call goes out on the same busy
connection: py4j fails it ("reentrant call"), closes the connection, and the interrupt now and
then came to nothing, the job going on and the write committing after the user pressed Ctrl-C.
:func:`spark_interrupts` puts its own handler in place meanwhile: the jobs are cancelled from
another thread (a connection of its own), and the interrupt is raised in the main thread at once
when it was not waiting on the JVM, else by :meth:`SparkInterrupts.check` once the call returned.
A SIGTERM the ``tidemark`` command takes as a Ctrl-C (:func:`tidemark.errors.raise_terminated`)
is handled the same way, and raised as :class:`~tidemark.errors.Terminated`.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Iterator
from types import FrameType

from pyspark.sql import SparkSession

from tidemark.errors import Terminated, raise_terminated

#: how often the jobs are cancelled again after a Ctrl-C, until the interrupted block ends
_CANCEL_PERIOD_S = 0.2
_active: SparkInterrupts | None = None


class SparkInterrupts:
    """A Ctrl-C (or SIGTERM) that came while Spark jobs ran: whether one did, and the cancelling of
    the jobs."""

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark
        self.requested = False
        #: a SIGTERM came, not (only) a Ctrl-C: the command ends as terminated
        self.terminated = False
        #: a Ctrl-C that came once the commit had begun, which it no longer stops
        self.late = False
        self._committing = False
        self.ended = threading.Event()

    def check(self) -> None:
        """Raise the Ctrl-C that came while the main thread waited on the JVM: a job that ended
        anyway (the cancel came too late) must not lead on to a commit."""
        if self.requested:
            raise self.interrupt()

    def interrupt(self) -> KeyboardInterrupt:
        """What the interrupt that came is raised as: a SIGTERM's says so (its exit status is 143)."""
        return Terminated() if self.terminated else KeyboardInterrupt()

    @property
    def signal_name(self) -> str:
        """The interrupt that came, as a message names it."""
        return "SIGTERM" if self.terminated else "Ctrl-C"

    @contextlib.contextmanager
    def committing(self) -> Iterator[None]:
        """The commit and what follows it: a Ctrl-C no longer stops the write there (one raised
        half-way through left it committed while the command said it was rolled back, and its
        table lock held). It is only recorded in :attr:`late`, for the caller to tell; one that
        came before is still raised by :meth:`check`. A commit that succeeded keeps it so until
        the interrupted block ends: the write is done, and a Ctrl-C raised after it would be
        said to have rolled it back."""
        self._committing = True
        try:
            yield
        except BaseException:
            self._committing = False
            raise

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGTERM:
            self.terminated = True
        if self._committing:
            self.late = True
            return
        again = self.requested
        self.requested = True
        if not again:
            threading.Thread(target=self._cancel_jobs, name="tidemark-cancel-jobs", daemon=True).start()
        # a second Ctrl-C stops the wait at once, as does one that came outside a call to the JVM
        if again or not _waits_on_jvm(frame):
            raise self.interrupt()

    def _cancel_jobs(self) -> None:
        """Cancel Spark's jobs until the block ends: a cancel stops only the jobs running, and the
        call the driver was in may start its job after it (a slow machine took seconds to)."""
        while True:
            try:
                self.spark.sparkContext.cancelAllJobs()
            except Exception as e:  # the JVM gone already: no job left to stop
                logging.getLogger("tidemark.spark").debug("could not cancel Spark's jobs after Ctrl-C: %s", e)
                return
            if self.ended.wait(_CANCEL_PERIOD_S):
                return


def _waits_on_jvm(frame: FrameType | None) -> bool:
    """True when ``frame`` lies within a py4j call, which an exception raised there would break."""
    while frame is not None:
        if str(frame.f_globals.get("__name__", "")).split(".")[0] == "py4j":
            return True
        frame = frame.f_back
    return False


@contextlib.contextmanager
def spark_interrupts(spark: SparkSession) -> Iterator[SparkInterrupts]:
    """Ctrl-C handled as the module says for the block, the previous handler restored after; a
    Ctrl-C seen in it is raised at its end at the latest. Within another such block, that one's.
    SIGTERM too, when the process takes it as a Ctrl-C (the ``tidemark`` command: a service's
    own SIGTERM handler, which stops it between runs, is left alone). Outside the main thread (a
    service's worker), where no signal handler runs, nothing changes."""
    global _active
    if threading.current_thread() is not threading.main_thread():
        yield SparkInterrupts(spark)
        return
    if _active is not None:
        yield _active
        return
    interrupts = SparkInterrupts(spark)
    signals = [signal.SIGINT]
    if signal.getsignal(signal.SIGTERM) is raise_terminated:
        signals.append(signal.SIGTERM)
    previous = {signum: signal.signal(signum, interrupts.on_signal) for signum in signals}
    _active = interrupts
    try:
        yield interrupts
        interrupts.check()
    except Exception as e:
        if interrupts.requested:  # what the cancelled job's call raised: the interrupt's doing
            raise interrupts.interrupt() from e
        raise
    finally:
        interrupts.ended.set()
        _active = None
        for signum, handler in previous.items():
            signal.signal(signum, handler)
