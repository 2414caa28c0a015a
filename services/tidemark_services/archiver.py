"""The archiver service: archives a table's old instants after each ``clean.completed`` (or on an
``archive.requested`` command), never past what the latest clean allows, and publishes
``archive.completed``.

An ``archive.requested`` may carry the table's own Hudi keys (the operator sends a HudiTable's
``keep.min.commits``, ``keep.max.commits``, ...): that archival runs with them over the service's
``--conf``; a request whose settings are refused is dead-lettered with the reason."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tidemark.errors import TableError
from tidemark.events import EventType, TimelineEvent, skipped
from tidemark.storage import S3Options
from tidemark.table.concurrency import ConcurrencyConfig
from tidemark.table.properties import read_properties
from tidemark.table_services.archive import ArchiveConfig, archive
from tidemark.timeline.archived import latest_archival
from tidemark_services.main import run_service
from tidemark_services.runtime import Handler, ServiceMetrics, log, open_table, rejected, request_settings

HANDLES = frozenset({EventType.CLEAN_COMPLETED, EventType.ARCHIVE_REQUESTED})


def _archive_completed(table: str, archived: Sequence[str], stopped_by: str | None) -> TimelineEvent:
    return TimelineEvent(
        EventType.ARCHIVE_COMPLETED,
        table,
        archived[-1],
        "archive",
        "COMPLETED",
        extra={"instantsArchived": str(len(archived)), "stoppedBy": stopped_by or ""},
    )


def make_handler(conf: Mapping[str, str], s3: S3Options, metrics: ServiceMetrics) -> Handler:
    config = ArchiveConfig.from_conf(conf)
    concurrency = ConcurrencyConfig.from_conf(conf)
    seen: set[str] = set()  # tables this process has handled an event of
    #: per table, the last request this process handled (its ce_id) and what answered it
    answered: dict[str, tuple[str, Sequence[TimelineEvent]]] = {}

    def handle(event: TimelineEvent) -> Sequence[TimelineEvent]:
        outputs = archive_for(event)
        if event.type is EventType.ARCHIVE_REQUESTED:
            answered[event.table] = (event.id, outputs)
        return outputs

    def archive_for(event: TimelineEvent) -> Sequence[TimelineEvent]:
        run_config, run_concurrency = config, concurrency
        if event.type is EventType.ARCHIVE_REQUESTED and any(k.startswith("hoodie.") for k in event.extra):
            merged, run_concurrency = request_settings(conf, event, "archiver")
            try:
                run_config = ArchiveConfig.from_conf(merged)
            except TableError as e:
                raise rejected(event, "archiver", e) from None
        storage = open_table(event.table, s3)
        first_since_start = event.table not in seen
        seen.add(event.table)
        result = archive(storage, run_config, concurrency=run_concurrency)
        plan = result.plan
        if plan.blocked_by:
            metrics.archival_blocked.labels(event.table, plan.blocked_by).inc()
        metrics.active_timeline.labels(event.table).set(result.active_instants)
        # an archival whose process died after writing the archive file is finished by this run
        # (its instants still on the active timeline): announce it, nobody else will
        archived = sorted(
            {i.timestamp for i in plan.instants} | {f.split(".", 1)[0] for f in result.finished_from_before}
        )
        if not archived:
            # a process killed after its archival finished but before it published gets the event
            # again with nothing left to do: the first event of a table after a start announces the
            # latest archival again (the same ce_id as the lost one: at worst a duplicate)
            latest = latest_archival(storage, read_properties(storage).archive_folder) if first_since_start else ()
            if latest:
                log.info("archiver: %s: archival up to %s done already; announcing it again", event.table, latest[-1])
                return [_archive_completed(event.table, latest, plan.blocked_by)]
            # a request this process handled already comes again (a refused commit, after a
            # rebalance): its answer is said again, not contradicted by "nothing to archive"
            request_id, answer = answered.get(event.table, ("", ()))
            if event.type is EventType.ARCHIVE_REQUESTED and request_id == event.id:
                log.info(
                    "archiver: %s: request %s handled already; announcing its answer again", event.table, event.instant
                )
                return answer
            why = plan.blocked_by or "no instant is due"
            log.info("archiver: %s: nothing to archive (%s)", event.table, why)
            # a request is answered, so it no longer holds the next one (the operator's Forbid)
            return [skipped(event, f"nothing to archive ({why})")] if event.type is EventType.ARCHIVE_REQUESTED else []
        log.info(
            "archiver: %s: %d instants archived, %s to %s%s",
            event.table,
            len(archived),
            archived[0],
            archived[-1],
            f"; stopped by: {plan.blocked_by}" if plan.blocked_by else "",
        )
        metrics.instants_archived.labels(event.table).inc(len(archived))
        return [_archive_completed(event.table, archived, plan.blocked_by)]

    return handle


def main(argv: list[str] | None = None) -> int:
    return run_service("archiver", HANDLES, make_handler, argv)


if __name__ == "__main__":
    raise SystemExit(main())
