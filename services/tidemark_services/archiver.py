"""The archiver service: archives a table's old instants after each ``clean.completed`` (or on an
``archive.requested`` command), never past what the latest clean allows, and publishes
``archive.completed``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tidemark.events import EventType, TimelineEvent
from tidemark.storage import S3Options, open_storage
from tidemark.table_services.archive import ArchiveConfig, archive
from tidemark.timeline import load_timeline
from tidemark_services.main import run_service
from tidemark_services.runtime import Handler, ServiceMetrics

HANDLES = frozenset({EventType.CLEAN_COMPLETED, EventType.ARCHIVE_REQUESTED})


def make_handler(conf: Mapping[str, str], s3: S3Options, metrics: ServiceMetrics) -> Handler:
    config = ArchiveConfig.from_conf(conf)

    def handle(event: TimelineEvent) -> Sequence[TimelineEvent]:
        storage = open_storage(event.table, s3)
        result = archive(storage, config)
        plan = result.plan
        if plan.blocked_by:
            metrics.archival_blocked.labels(event.table, plan.blocked_by).inc()
        metrics.active_timeline.labels(event.table).set(len(load_timeline(storage)))
        # an archival whose process died after writing the archive file is finished by this run
        # (its instants still on the active timeline): announce it, nobody else will
        archived = sorted(
            {i.timestamp for i in plan.instants} | {f.split(".", 1)[0] for f in result.finished_from_before}
        )
        if not archived:
            return []
        metrics.instants_archived.labels(event.table).inc(len(archived))
        return [
            TimelineEvent(
                EventType.ARCHIVE_COMPLETED,
                event.table,
                archived[-1],
                "archive",
                "COMPLETED",
                extra={"instantsArchived": str(len(archived)), "stoppedBy": plan.blocked_by or ""},
            )
        ]

    return handle


def main(argv: list[str] | None = None) -> int:
    return run_service("archiver", HANDLES, make_handler, argv)


if __name__ == "__main__":
    raise SystemExit(main())
