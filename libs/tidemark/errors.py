"""Every error tidemark raises on purpose derives from :class:`TidemarkError`.

The names are flat and explicit so callers can catch exactly what they mean; the message always
says what was wrong and where (a path, an offset, a key).
"""

from __future__ import annotations

from typing import NoReturn


class TidemarkError(Exception):
    """Base class of all errors raised by tidemark."""


# --- storage -------------------------------------------------------------------------------------


class StorageError(TidemarkError):
    """A storage operation failed (I/O error, endpoint unreachable, access denied)."""


class StorageUnreachableError(StorageError):
    """The storage endpoint did not answer (connection refused, a connect or read timeout), or an
    HTTP server there that is not S3 did (a 404 without an S3 error): every further call would
    fail the same way, so work over many files stops at the first, and services retry it."""


class InvalidLocationError(StorageError):
    """A location string (path, ``file://`` or ``s3://`` URI) cannot be used."""


class ObjectNotFoundError(StorageError):
    """The file or object does not exist."""


class BucketNotFoundError(StorageError):
    """The S3 endpoint answered that the location's bucket does not exist: no table is there (a
    mistyped location, or a deleted bucket), which no retry changes."""


class ObjectAlreadyExistsError(StorageError):
    """A create-if-absent found the file or object already there."""


class AppendNotSupportedError(StorageError):
    """The storage cannot append to an existing object (object stores such as S3)."""


class VersionMismatchError(StorageError):
    """A conditional write (compare-and-swap) found the file changed or gone since the version it
    was given: another process wrote it in between."""


class OutcomeUnknownError(StorageError):
    """A create whose answer was lost, with storage still unreachable to ask whether it landed:
    the instant may be completed or not. Nothing may be rolled back on that guess (a completed
    commit would be taken back, or, reported failed, written twice by a rerun). ``instant`` is the
    completed instant's file name."""

    def __init__(self, message: str, instant: str = "") -> None:
        super().__init__(message)
        self.instant = instant


# --- log format ----------------------------------------------------------------------------------


class LogFormatError(TidemarkError):
    """Base class for errors about Hudi log files."""


class InvalidLogFileNameError(LogFormatError):
    """A file name is not a Hudi log file name (``.{fileId}_{baseInstant}.log.{version}_{token}``)."""


class InvalidBaseFileNameError(LogFormatError):
    """A file name is not a Hudi base file name (``{fileId}_{writeToken}_{instant}.{ext}``)."""


class LogBlockContentError(LogFormatError):
    """A block's framing is intact but its content cannot be decoded (bad Avro, bad Parquet,
    unsupported content version, or a content type tidemark cannot decode)."""


class LogBlockEncodeError(LogFormatError):
    """Records or headers given to the writer cannot be encoded into a log block."""


# --- timeline and table --------------------------------------------------------------------------


class TimelineError(TidemarkError):
    """The timeline under ``.hoodie/`` is not what an operation needs."""


class InvalidInstantError(TimelineError):
    """An instant time, action or state file name is malformed."""


class InstantStateError(TimelineError):
    """An instant cannot move to the asked state: it is missing, already there, or another
    writer got there first (state files are created with create-if-absent)."""


class PendingRestoreError(InstantStateError):
    """A restore is unfinished: the table may be half restored, so nothing may write to it (as in
    Hudi) until that restore is run again to its end."""


class PendingRollbackError(InstantStateError):
    """A rollback stopped half-way: the write it rolls back is partly deleted, so no compaction
    may be planned over its files until that rollback is finished (running it again, or the next
    write, does); and a rollback never deletes a file a pending compaction's plan lists."""


class LiveWriterError(InstantStateError):
    """A pending write still has a fresh heartbeat: its writer is alive, so nobody else may roll
    it back (wait for the heartbeat to expire, or stop that writer)."""


class CompactionTakenUpError(InstantStateError):
    """A compaction's runner stalled past its heartbeat's expiry before starting its plan, and
    another process started it meanwhile: that process runs it, and this one, having written
    nothing, leaves it to it."""


class EarlierWriteInflightError(InstantStateError):
    """In single-writer mode a write is pending: a compaction planned now would hide the log
    files it writes on the slices it routed to (no commit-time check refuses that write), so
    none is planned until it ends or is rolled back (Hudi's "Earliest write inflight instant
    time must be later than compaction time")."""


class InstantTimeAheadError(TimelineError):
    """The table's latest instant is later than this machine's clock by more than ordinary clock
    skew: a new instant must sort after it, and waiting for the clock could take hours (an
    instant stamped in local time by a writer east of UTC, or a clock that is far behind)."""


class InstantMetadataError(TimelineError):
    """An instant's metadata (JSON or Avro) cannot be read or is not what Hudi writes."""


class TableError(TidemarkError):
    """Base class for errors about a Hudi table as a whole."""


class TableNotFoundError(TableError):
    """The location holds no Hudi table (no ``.hoodie/hoodie.properties``)."""


class InvalidTablePropertiesError(TableError):
    """``hoodie.properties`` is unreadable, inconsistent (checksum), or of an unsupported version."""


class UnsupportedTableFeatureError(InvalidTablePropertiesError):
    """The table uses a Hudi feature tidemark would misread or leave stale (ORC base files, a
    bootstrapped table, partition columns dropped from the files, CDC log files): refused before
    anything is read or changed."""


class TableChangedError(TableError):
    """A read's table changed under it: a clean, rollback, restore or archival since it loaded its
    timeline removed a file or an instant it was reading. Reading again reads the table as it is."""


class CorruptBaseFileError(TableError):
    """A base file is not readable Parquet (truncated, empty, or damaged footer or pages)."""


class MetadataTableEnabledError(TableError):
    """The table has Hudi's metadata table (``.hoodie/metadata/``, listed in
    ``hoodie.table.metadata.partitions``), which Apache's readers take the file listing from and
    tidemark does not maintain: a change made without it would leave it stale. Refused before
    anything is written; ``hoodie.metadata.enable=false`` disables it as Apache's writer does."""


class KeyGeneratorError(TableError):
    """A key generator class tidemark does not implement, a key generator setting it cannot use,
    or a record whose key or partition path the key generator cannot compute."""


class PayloadError(TableError):
    """A payload class or record merge mode tidemark does not implement (for a write or a
    compaction), or a record the table's payload cannot merge (a Debezium record without its
    sequence column)."""


class MarkerError(TableError):
    """A marker name or a ``MARKERS<N>`` file that is not Hudi's (``<partition>/<file>.marker.<IOType>``,
    one a line), or that names a file outside the table."""


# --- several writers on one table -------------------------------------------------------------


class ConcurrencyError(TidemarkError):
    """Base class of errors about writers and table services sharing one table."""


class WriteConflictError(ConcurrencyError):
    """This write touched file groups that another write changed while it ran (found early, at a
    marker, or at commit): this write lost and was rolled back; the other is untouched.

    ``instant`` is this write, ``other`` the one it conflicted with, ``file_groups`` up to ten of
    the shared ``partition/fileId`` (``partition/*`` where a whole partition is replaced), and
    ``stage`` ``"early"`` or ``"commit"``."""

    def __init__(
        self, message: str, instant: str = "", other: str = "", file_groups: tuple[str, ...] = (), stage: str = ""
    ) -> None:
        super().__init__(message)
        self.instant = instant
        self.other = other
        self.file_groups = file_groups
        self.stage = stage


class LockError(ConcurrencyError):
    """The table lock (a lease on storage, ``.hoodie/.locks/``) could not be used."""


class LockTimeoutError(LockError):
    """The table lock stayed held by another live process for longer than the allowed wait."""


class LockLostError(LockError):
    """This process's lease on the table lock expired and another process took the lock over (or
    the lock file changed under it): it is fenced off and must not complete what it was doing."""


class CoordinatorError(ConcurrencyError):
    """The writer-coordinator could not be used: unreachable, or it refused a request (the HTTP
    status and its reason are in the message). Writers fall back to direct markers."""


class CoordinatorUnavailableError(CoordinatorError):
    """The writer-coordinator did not answer (connection refused, a timeout, a 5xx)."""


# --- events --------------------------------------------------------------------------------------


class EventDecodeError(TidemarkError):
    """A Kafka message is not a tidemark timeline event (CloudEvents 1.0, binary mode, Avro data):
    a header is missing, duplicated or not UTF-8, the type or spec version is unknown, or the
    payload is not valid Avro of the ``TimelineEvent`` schema."""


class BrokerUnavailableError(TidemarkError):
    """The Kafka brokers could not be reached (or did not acknowledge) within the allowed time."""


class MessageRefusedError(BrokerUnavailableError):
    """The broker (or the Kafka client, before sending) refused a message for what it is: larger
    than the producer's or the topic's limit, an invalid record. Sending it again changes nothing.
    A kind of :class:`BrokerUnavailableError`, so a caller that only retries still does."""


class GroupRebalancedError(BrokerUnavailableError):
    """An offset commit the consumer group refused because it rebalanced while the polled events
    were handled: most often the work between two polls outlasted the group's poll limit
    (``max_poll_interval_ms``) and the consumer left the group. Not a broker fault: the brokers are
    fine, and the events are delivered again. A kind of :class:`BrokerUnavailableError`, so a
    caller that consumes again after broker trouble does the right thing; ``elapsed_s`` is the
    time since the last poll, ``limit_s`` the poll limit."""

    def __init__(self, message: str, elapsed_s: float = 0.0, limit_s: float = 0.0):
        super().__init__(message)
        self.elapsed_s = elapsed_s
        self.limit_s = limit_s


class UnreadableRecordError(TidemarkError):
    """A Kafka record the client cannot parse (its batch fails the CRC check, a header name is not
    UTF-8: what Kafka's protocol lets non-Java producers send): no retry reads it, so the consumer
    has moved past it. Not broker trouble; ``topic``, ``partition`` and ``offset`` name it."""

    def __init__(self, message: str, topic: str, partition: int, offset: int) -> None:
        super().__init__(message)
        self.topic = topic
        self.partition = partition
        self.offset = offset


class KafkaSecurityError(BrokerUnavailableError):
    """A Kafka broker was reached but the TLS handshake or the SASL authentication failed (wrong
    CA, a certificate that does not name the broker, refused credentials, unsupported mechanism).

    A kind of :class:`BrokerUnavailableError`: to the client the brokers are unusable until the
    settings or the brokers are fixed, and every caller that already outlives unusable brokers
    (retrying, or giving up on an event) must do the same here; a caller that wants to say more
    catches this class. ``broker`` is ``host:port``, ``stage`` ``"tls"`` or ``"sasl"``."""

    def __init__(self, message: str, broker: str = "", stage: str = "", protocol: str = "", mechanism: str = ""):
        super().__init__(message)
        self.broker = broker
        self.stage = stage
        self.protocol = protocol
        self.mechanism = mechanism


class SparkStartError(TidemarkError):
    """The local Spark session could not start (no Java, too little memory, too few open files)."""


class MissingExtraError(TidemarkError):
    """What was asked for needs a package of one of tidemark's extras (``pip install
    'tidemark[EXTRA]'``) that is not installed."""

    def __init__(self, what: str, module: str | None, extra: str) -> None:
        package = module.split(".")[0] if module else "of its extra"  # kafka.conn: the package kafka
        super().__init__(
            f"{what} needs the Python package {package}, which is not installed: pip install 'tidemark[{extra}]'"
        )


# --- command line --------------------------------------------------------------------------------


class UsageError(TidemarkError):
    """A command's flags that do not go together, or an argument argparse cannot check itself:
    told as argparse tells its own usage errors (the command's usage line, exit 2), so that a
    script can tell a wrong call from a failed one."""


class Terminated(KeyboardInterrupt):
    """A SIGTERM (Kubernetes stopping a pod, ``docker stop``, ``kill``) to the ``tidemark`` command,
    raised as a Ctrl-C is (:func:`raise_terminated`) so that the command stops as on one: its write
    rolled back, its heartbeat removed, the table lock released. Unhandled, a SIGTERM killed it at
    once and left all three behind; sent to a container's PID 1, the kernel dropped it."""


def raise_terminated(signum: int, frame: object) -> NoReturn:
    """The ``tidemark`` command's SIGTERM handler: :class:`Terminated`."""
    raise Terminated


def raised_by_interrupt(error: BaseException) -> bool:
    """True when ``error`` came of a Ctrl-C (or a SIGTERM, :class:`Terminated`). An interrupt that
    lands while Python waits on Spark's JVM reaches the caller as py4j's own error, raised while
    py4j shut its connection down (``Gateway must be connected to send cancel cmd.``), with the
    interrupt as its context."""
    return _in_chain(error, KeyboardInterrupt)


def raised_by_sigterm(error: BaseException) -> bool:
    """True when ``error`` came of a SIGTERM (a :class:`Terminated` in its chain)."""
    return _in_chain(error, Terminated)


def _in_chain(error: BaseException, kind: type[BaseException]) -> bool:
    seen: set[int] = set()
    cause: BaseException | None = error
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, kind):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False
