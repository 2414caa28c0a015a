"""Restore to a savepoint: roll back, newest first, every write instant after it (compactions
included), under a ``restore`` instant with Hudi's Avro ``HoodieRestoreMetadata``."""

from __future__ import annotations

import time

from tidemark.errors import InstantStateError
from tidemark.storage.base import Storage
from tidemark.table.write_client import rollback
from tidemark.table_services.savepoint import list_savepoints
from tidemark.timeline import (
    RESTORE,
    Instant,
    create_requested,
    instant_path,
    load_timeline,
    next_instant_time,
    read_instant,
    transition_to_completed,
    transition_to_inflight,
)
from tidemark.timeline import avro_metadata as avro


def restore(storage: Storage, savepoint: str) -> Instant:
    """Bring the table back to the savepoint ``savepoint``: everything written after it is rolled
    back (each as a rollback instant), then the restore completes."""
    if savepoint not in list_savepoints(storage):
        raise InstantStateError(f"{storage.uri}: no savepoint at {savepoint} to restore to")
    timeline = load_timeline(storage)
    later = [i for i in timeline.write_instants() if i.timestamp > savepoint]
    started = time.monotonic()
    ts = next_instant_time(timeline)
    requested = create_requested(storage, ts, RESTORE)
    inflight = transition_to_inflight(storage, requested)
    rolled: dict[str, list[dict[str, object]]] = {}
    for instant in reversed(later):
        result = rollback(storage, instant.timestamp)
        where = storage.full_uri(instant_path(result.rollback_instant))
        rolled[instant.timestamp] = [
            avro.deserialize(read_instant(storage, result.rollback_instant), "HoodieRollbackMetadata", where)
        ]
    metadata = {
        "startRestoreTime": ts,
        "timeTakenInMillis": int((time.monotonic() - started) * 1000),
        "instantsToRollback": [i.timestamp for i in reversed(later)],
        "hoodieRestoreMetadata": rolled,
        "version": 1,
        "restoreInstantInfo": [{"commitTime": i.timestamp, "action": i.action} for i in reversed(later)],
    }
    return transition_to_completed(storage, inflight, avro.serialize("HoodieRestoreMetadata", metadata))
