"""Instants: ``yyyyMMddHHmmssSSS`` timestamps, an action, and a state, named on storage as Hudi
table version 6 (timeline layout 1) names them under ``.hoodie/``."""

from __future__ import annotations

import datetime
import enum
import re
from dataclasses import dataclass

from tidemark.errors import InvalidInstantError

COMMIT = "commit"
DELTA_COMMIT = "deltacommit"
REPLACE_COMMIT = "replacecommit"
COMPACTION = "compaction"
ROLLBACK = "rollback"
CLEAN = "clean"
SAVEPOINT = "savepoint"
RESTORE = "restore"
ACTIONS = (COMMIT, DELTA_COMMIT, REPLACE_COMMIT, COMPACTION, ROLLBACK, CLEAN, SAVEPOINT, RESTORE)
#: actions whose completed instants change what a reader sees
WRITE_ACTIONS = (COMMIT, DELTA_COMMIT, REPLACE_COMMIT, COMPACTION)

#: Hudi's special instant times (HoodieTimeline's INIT_INSTANT_TS, METADATA_BOOTSTRAP_INSTANT_TS,
#: FULL_BOOTSTRAP_INSTANT_TS): no dates, and earlier than every other instant
HUDI_INIT_TIMES = ("00000000000000", "00000000000001", "00000000000002")
# 14 digits: second-precision instants, which predate Hudi 0.9
_FILE = re.compile(r"^(?P<ts>\d{17}|\d{14})\.(?P<rest>[a-z.]+)$")


class State(enum.IntEnum):
    REQUESTED = 0
    INFLIGHT = 1
    COMPLETED = 2


def new_instant_time(now: datetime.datetime | None = None) -> str:
    """An instant time for now, in UTC, to the millisecond (Hudi's ``yyyyMMddHHmmssSSS``)."""
    now = now or datetime.datetime.now(datetime.UTC)
    return now.strftime("%Y%m%d%H%M%S") + f"{now.microsecond // 1000:03d}"


def instant_time_in_zone(moment: datetime.datetime, timeline_timezone: str | None) -> str:
    """The instant time a writer of a table whose ``hoodie.table.timeline.timezone`` is
    ``timeline_timezone`` stamps at ``moment``: UTC for UTC; otherwise (LOCAL, Hudi's default, also
    when the table does not say) this process's own time zone, as Hudi's instant time generator does."""
    if timeline_timezone == "UTC":
        return new_instant_time(moment.astimezone(datetime.UTC))
    return new_instant_time(moment.astimezone())


def instant_epoch_ms(timestamp: str) -> int:
    """The wall-clock time an instant time (``yyyyMMddHHmmss[SSS]``, UTC) stands for, in epoch
    milliseconds. Raises :class:`ValueError` for a time that is no date (Hudi's special instants)."""
    stamp = datetime.datetime.strptime(timestamp[:14], "%Y%m%d%H%M%S").replace(tzinfo=datetime.UTC)
    millis = int(timestamp[14:17]) if len(timestamp) >= 17 else 0
    return int(stamp.timestamp() * 1000) + millis


def check_timestamp(timestamp: str) -> str:
    # plain string tests, not the regex: every instant of a 50k-instant timeline passes here
    well_formed = isinstance(timestamp, str) and len(timestamp) in (14, 17) and timestamp.isascii()
    if not well_formed or not timestamp.isdigit():
        raise InvalidInstantError(f"not an instant time (yyyyMMddHHmmssSSS): {timestamp!r}")
    return timestamp


@dataclass(frozen=True, order=True, slots=True)
class Instant:
    """One state of one action on the timeline. Orders by time, then action, then state."""

    timestamp: str
    action: str
    state: State = State.COMPLETED

    def __post_init__(self) -> None:
        check_timestamp(self.timestamp)
        if self.action not in ACTIONS:
            raise InvalidInstantError(f"unknown action {self.action!r} (known: {', '.join(ACTIONS)})")

    @property
    def is_completed(self) -> bool:
        return self.state is State.COMPLETED

    def with_state(self, state: State) -> Instant:
        return Instant(self.timestamp, self.action, state)

    @property
    def file_name(self) -> str:
        """The state file under ``.hoodie/`` (layout 1)."""
        ts, action = self.timestamp, self.action
        if self.state is State.REQUESTED:
            return f"{ts}.{action}.requested"
        if self.state is State.INFLIGHT:
            return f"{ts}.inflight" if action == COMMIT else f"{ts}.{action}.inflight"
        # a completed compaction is a commit on the timeline
        return f"{ts}.{COMMIT if action == COMPACTION else action}"

    @classmethod
    def parse(cls, file_name: str) -> Instant:
        """Parse a state file name. Raises :class:`InvalidInstantError` for other files."""
        m = _FILE.match(file_name)
        if not m:
            raise InvalidInstantError(f"not an instant file: {file_name!r}")
        ts, rest = m["ts"], m["rest"]
        if rest == "inflight":
            return cls(ts, COMMIT, State.INFLIGHT)
        parts = rest.split(".")
        if len(parts) == 1 and parts[0] in ACTIONS and parts[0] != COMPACTION:
            return cls(ts, parts[0], State.COMPLETED)
        if len(parts) == 2 and parts[0] in ACTIONS and parts[1] in ("requested", "inflight"):
            return cls(ts, parts[0], State.REQUESTED if parts[1] == "requested" else State.INFLIGHT)
        raise InvalidInstantError(f"not an instant file: {file_name!r}")

    def __str__(self) -> str:
        return f"{self.timestamp}.{self.action}[{self.state.name}]"
