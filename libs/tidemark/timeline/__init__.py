"""The Hudi timeline (table version 6, layout 1): instants, the active timeline, commit metadata."""

from tidemark.timeline.active import (
    METAFOLDER,
    Timeline,
    create_inflight,
    create_requested,
    delete_instant_files,
    instant_path,
    load_timeline,
    read_instant,
    transition_to_completed,
    transition_to_inflight,
)
from tidemark.timeline.instant import (
    CLEAN,
    COMMIT,
    COMPACTION,
    DELTA_COMMIT,
    REPLACE_COMMIT,
    RESTORE,
    ROLLBACK,
    SAVEPOINT,
    Instant,
    State,
    new_instant_time,
)
from tidemark.timeline.metadata import CommitMetadata, WriteStat

__all__ = [
    "CLEAN",
    "COMMIT",
    "COMPACTION",
    "DELTA_COMMIT",
    "METAFOLDER",
    "REPLACE_COMMIT",
    "RESTORE",
    "ROLLBACK",
    "SAVEPOINT",
    "CommitMetadata",
    "Instant",
    "State",
    "Timeline",
    "WriteStat",
    "create_inflight",
    "create_requested",
    "delete_instant_files",
    "instant_path",
    "load_timeline",
    "new_instant_time",
    "read_instant",
    "transition_to_completed",
    "transition_to_inflight",
]
