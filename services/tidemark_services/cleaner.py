"""The cleaner service: cleans a table when Hudi's trigger says so (``hoodie.clean.max.commits``
commits since the last clean) or on a ``clean.requested`` command, and publishes
``clean.completed`` with the retained commit and the EarliestCommitToNotArchive."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tidemark.events import EventType, TimelineEvent
from tidemark.storage import S3Options, open_storage
from tidemark.table_services.clean import CleanConfig, clean, last_clean_extra, should_clean
from tidemark.timeline import load_timeline
from tidemark_services.main import run_service
from tidemark_services.runtime import Handler, ServiceMetrics

HANDLES = frozenset({EventType.INSTANT_COMPLETED, EventType.CLEAN_REQUESTED})


def make_handler(conf: Mapping[str, str], s3: S3Options, metrics: ServiceMetrics) -> Handler:
    config = CleanConfig.from_conf(conf)

    def handle(event: TimelineEvent) -> Sequence[TimelineEvent]:
        storage = open_storage(event.table, s3)
        timeline = load_timeline(storage)
        metrics.active_timeline.labels(event.table).set(len(timeline))
        if event.type is EventType.INSTANT_COMPLETED and not should_clean(storage, config):
            return []
        if event.type is EventType.CLEAN_REQUESTED:
            last, _, _ = last_clean_extra(storage, timeline)
            if last is not None and last.timestamp > event.instant:
                return []  # a clean already ran after this request: a redelivery does nothing
        result = clean(storage, config)
        if result is None:
            return []
        metrics.files_deleted.labels(event.table).inc(len(result.deleted))
        metrics.bytes_reclaimed.labels(event.table).inc(result.bytes_reclaimed)
        metrics.active_timeline.labels(event.table).set(len(load_timeline(storage)))
        ectr = result.plan.earliest_commit_to_retain
        return [
            TimelineEvent(
                EventType.CLEAN_COMPLETED,
                event.table,
                result.instant.timestamp,
                "clean",
                "COMPLETED",
                earliest_commit_to_retain=ectr.timestamp if ectr else None,
                earliest_commit_to_not_archive=result.plan.earliest_commit_to_not_archive,
                extra={"filesDeleted": str(len(result.deleted))},
            )
        ]

    return handle


def main(argv: list[str] | None = None) -> int:
    return run_service("cleaner", HANDLES, make_handler, argv)


if __name__ == "__main__":
    raise SystemExit(main())
