"""The cleaner service: cleans a table when Hudi's trigger says so (``hoodie.clean.max.commits``
commits since the last clean) or on a ``clean.requested`` command, and publishes
``clean.completed`` with the retained commit and the EarliestCommitToNotArchive.

A ``clean.requested`` may carry the table's own Hudi keys (the operator sends a HudiTable's clean
settings): that clean runs with them over the service's ``--conf``; a request whose settings are
refused is dead-lettered with the reason."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tidemark.errors import TableError
from tidemark.events import EventType, TimelineEvent, skipped
from tidemark.storage import S3Options, Storage
from tidemark.table.concurrency import ConcurrencyConfig
from tidemark.table_services.clean import (
    EARLIEST_COMMIT_TO_NOT_ARCHIVE,
    CleanConfig,
    clean,
    remove_abandoned_temporaries,
    should_clean,
)
from tidemark.timeline import CLEAN, Instant, instant_path, load_timeline, read_instant
from tidemark.timeline import avro_metadata as avro
from tidemark_services.main import run_service
from tidemark_services.runtime import Handler, ServiceMetrics, log, open_table, rejected, request_settings

HANDLES = frozenset({EventType.INSTANT_COMPLETED, EventType.CLEAN_REQUESTED})


def _clean_metadata(storage: Storage, clean_instant: Instant) -> dict[str, Any]:
    where = storage.full_uri(instant_path(clean_instant))
    metadata: dict[str, Any] = avro.deserialize(read_instant(storage, clean_instant), "HoodieCleanMetadata", where)
    return metadata


def clean_completed(table: str, clean_instant: Instant, metadata: Mapping[str, Any]) -> TimelineEvent:
    """``clean.completed`` for a completed clean, from what it recorded on storage (its
    ``HoodieCleanMetadata``): its retained commit, EarliestCommitToNotArchive and the number of
    files it deleted."""
    extra = metadata.get("extraMetadata") or {}
    return TimelineEvent(
        EventType.CLEAN_COMPLETED,
        table,
        clean_instant.timestamp,
        "clean",
        "COMPLETED",
        earliest_commit_to_retain=metadata.get("earliestCommitToRetain") or None,
        earliest_commit_to_not_archive=extra.get(EARLIEST_COMMIT_TO_NOT_ARCHIVE) or None,
        extra={"filesDeleted": str(metadata.get("totalFilesDeleted", 0))},
    )


def _covers(clean_instant: Instant, metadata: Mapping[str, Any], event: TimelineEvent) -> bool:
    """Whether the clean may be the one ``event`` led to."""
    if event.type is EventType.CLEAN_REQUESTED:
        return clean_instant.timestamp > event.instant
    return str(metadata.get("lastCompletedCommitTimestamp") or "") >= event.instant


def _nothing_to_clean(event: TimelineEvent) -> list[TimelineEvent]:
    """Logged; a request is answered (``clean.skipped``), so it no longer holds the next one."""
    log.info("cleaner: %s: nothing to clean after %s %s", event.table, event.type, event.instant)
    if event.type is EventType.CLEAN_REQUESTED:
        return [skipped(event, "nothing to clean")]
    return []


def make_handler(conf: Mapping[str, str], s3: S3Options, metrics: ServiceMetrics) -> Handler:
    config = CleanConfig.from_conf(conf)
    concurrency = ConcurrencyConfig.from_conf(conf)
    seen: set[str] = set()  # tables this process has handled an event of

    def handle(event: TimelineEvent) -> Sequence[TimelineEvent]:
        run_config, run_concurrency = config, concurrency
        if event.type is EventType.CLEAN_REQUESTED and any(k.startswith("hoodie.") for k in event.extra):
            merged, run_concurrency = request_settings(conf, event)
            try:
                run_config = CleanConfig.from_conf(merged)
            except TableError as e:
                raise rejected(event, "cleaner", e) from None
        storage = open_table(event.table, s3)
        timeline = load_timeline(storage)
        metrics.active_timeline.labels(event.table).set(len(timeline))
        first_since_start = event.table not in seen
        seen.add(event.table)
        last = timeline.completed().of_actions(CLEAN).last()
        done = (event.type is EventType.INSTANT_COMPLETED and not should_clean(storage, run_config, timeline)) or (
            event.type is EventType.CLEAN_REQUESTED and last is not None and last.timestamp > event.instant
        )
        if done:
            # A process killed after its clean completed but before it published clean.completed
            # gets the event again, and nothing is left to do. The first event of a table after a
            # start therefore announces the latest clean again when it may be the one the event led
            # to: the same ce_id as the lost one, so at worst a consumer sees it twice. A request
            # with a clean after it was cleaned for (a redelivery, after a refused commit, to this
            # same process): it is answered with that clean again, never as having had nothing to do.
            if last is not None and (first_since_start or event.type is EventType.CLEAN_REQUESTED):
                metadata = _clean_metadata(storage, last)
                if _covers(last, metadata, event):
                    log.info("cleaner: %s: clean %s done already; announcing it again", event.table, last.timestamp)
                    return [clean_completed(event.table, last, metadata)]
            return _nothing_to_clean(event)
        # listed above, for this event
        result = clean(storage, run_config, timeline=timeline, concurrency=run_concurrency)
        if run_config.enabled:  # switched off, cleaning changes nothing
            remove_abandoned_temporaries(storage)
        if result is None:
            return _nothing_to_clean(event)
        for run in (*result.finished_first, result):
            log.info(
                "cleaner: %s: clean %s completed: %d files deleted, %d bytes reclaimed%s",
                event.table,
                run.instant.timestamp,
                len(run.deleted),
                run.bytes_reclaimed,
                " (a pending clean finished)" if run is not result else "",
            )
            if run.completed_by_another:
                log.info(
                    "cleaner: %s: clean %s: another cleaner running it at the same time completed it first",
                    event.table,
                    run.instant.timestamp,
                )
        metrics.files_deleted.labels(event.table).inc(len(result.all_deleted))
        metrics.bytes_reclaimed.labels(event.table).inc(result.all_bytes_reclaimed)
        metrics.active_timeline.labels(event.table).set(len(load_timeline(storage)))
        # a pending clean this run finished first (a killed cleaner's) is announced too
        completed = (*(r.instant for r in result.finished_first), result.instant)
        return [clean_completed(event.table, i, _clean_metadata(storage, i)) for i in completed]

    return handle


def main(argv: list[str] | None = None) -> int:
    return run_service("cleaner", HANDLES, make_handler, argv)


if __name__ == "__main__":
    raise SystemExit(main())
