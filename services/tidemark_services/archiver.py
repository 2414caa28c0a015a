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
from tidemark.timeline.archived import ArchivedBlock, latest_archival_block
from tidemark_services.main import run_service
from tidemark_services.runtime import Handler, ServiceMetrics, log, open_table, rejected, request_settings

HANDLES = frozenset({EventType.CLEAN_COMPLETED, EventType.ARCHIVE_REQUESTED})


def _archive_completed(table: str, archived: Sequence[str], stopped_by: str | None) -> TimelineEvent:
    """``stopped_by``: the guard that stopped the archival early, "" when none did; None when it
    is not known (the archive log does not record it), and then ``stoppedBy`` is left out rather
    than taken from another run's plan."""
    extra = {"instantsArchived": str(len(archived))}
    if stopped_by is not None:
        extra["stoppedBy"] = stopped_by
    return TimelineEvent(EventType.ARCHIVE_COMPLETED, table, archived[-1], "archive", "COMPLETED", extra=extra)


def _covers(archival: ArchivedBlock, event: TimelineEvent) -> bool:
    """Whether the archival may be the one ``event`` led to: it ran after the event's instant (the
    clean's, or the request's). Its block's INSTANT_TIME says when it ran; an archival by Hudi's
    archiver records none, and no tidemark announcement of it was lost."""
    return archival.instant_time is not None and archival.instant_time > event.instant


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
            # latest archival again when it may be the one the event led to (the same ce_id as the
            # lost one: at worst a duplicate); an older one is not, and a request is then skipped
            latest = (
                latest_archival_block(storage, read_properties(storage).archive_folder) if first_since_start else None
            )
            if latest is not None and latest.completed and _covers(latest, event):
                log.info(
                    "archiver: %s: archival up to %s done already; announcing it again",
                    event.table,
                    latest.completed[-1],
                )
                # this run's plan says nothing of where that archival stopped
                return [_archive_completed(event.table, latest.completed, None)]
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
        # a stopped archival finished alone: this run's plan, which archived nothing, did not stop it
        stopped_by = (plan.blocked_by or "") if plan.instants else None
        log.info(
            "archiver: %s: %d instants archived, %s to %s%s",
            event.table,
            len(archived),
            archived[0],
            archived[-1],
            f"; stopped by: {stopped_by}" if stopped_by else "",
        )
        metrics.instants_archived.labels(event.table).inc(len(archived))
        return [_archive_completed(event.table, archived, stopped_by)]

    return handle


def main(argv: list[str] | None = None) -> int:
    return run_service("archiver", HANDLES, make_handler, argv)


if __name__ == "__main__":
    raise SystemExit(main())
