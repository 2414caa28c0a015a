"""A ``HudiTable``'s status, read from the table's timeline and from the services' completed
events, never invented: :func:`observe` reads storage, and the rest are pure functions of what it
read, the events seen, and the scheduler's decision."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from tidemark.errors import InvalidTablePropertiesError, MetadataTableEnabledError, UnsupportedTableFeatureError
from tidemark.events import EventType, TimelineEvent
from tidemark.storage import Storage
from tidemark.table.metadata_table import check_change, check_changeable
from tidemark.table.properties import TIMELINE_TIMEZONE, TableProperties, read_properties
from tidemark.table_services.archive import REPLACED_FILES_LEFT, ArchiveConfig, plan_archive
from tidemark.table_services.clean import last_clean_extra
from tidemark.timeline import CLEAN, COMPACTION, DELTA_COMMIT, Timeline, instant_path, load_timeline, read_instant
from tidemark.timeline import avro_metadata as avro
from tidemark.timeline.archived import latest_archival
from tidemark_operator.schedule import Decision, LastRequest, TableFacts, answer, time_of
from tidemark_operator.spec import Service, TableSpec

READY, DEGRADED, ARCHIVAL_BLOCKED = "Ready", "Degraded", "ArchivalBlocked"
#: the guards of :func:`tidemark.table_services.archive.plan_archive` that block archival (the
#: others, keep.min.commits and "not above keep.max.commits", are the settings working as meant)
_BLOCKING_GUARDS = ("savepoint", "pending ", "earliest commit to not archive", REPLACED_FILES_LEFT)
#: how the cleaner, the archiver and the compaction Job (``tidemark compact``) name what they refuse
_COMMANDS = {Service.CLEAN: "clean", Service.ARCHIVE: "archive", Service.COMPACTION: "compact"}
#: what :func:`tidemark.table.metadata_table.check_changeable` refuses a table with; the services
#: dead-letter every request of such a table, so none is sent
_REFUSALS = (InvalidTablePropertiesError, MetadataTableEnabledError, UnsupportedTableFeatureError)


@dataclass(frozen=True)
class Observation:
    """What one read of a table's storage found."""

    timeline: Timeline
    #: the latest completed clean: (instant, files deleted, earliest commit to retain)
    last_clean: tuple[str, int, str | None] | None
    #: the instants the latest archival moved, oldest first
    last_archival: tuple[str, ...]
    #: the guard holding archival back and where, when one does (see :data:`_BLOCKING_GUARDS`)
    archival_blocked: tuple[str, str] | None
    #: the services tidemark refuses to run on this table, and why (libs' own words)
    refused: frozenset[Service] = frozenset()
    refusal: str | None = None
    #: whether the writers stamp instants in UTC (``hoodie.table.timeline.timezone=UTC``); Hudi's
    #: default, LOCAL, is the writer's own zone, which the operator cannot know
    instants_in_utc: bool = True


def observe(storage: Storage, spec: TableSpec) -> Observation:
    """Read the table: its properties (a missing table fails here, clearly), its timeline, the
    latest clean's metadata, the latest archival, and what would stop archival now."""
    props = read_properties(storage)
    timeline = load_timeline(storage)
    last_clean = None
    clean, _, retained = last_clean_extra(storage, timeline)
    if clean is not None:
        where = storage.full_uri(instant_path(clean))
        metadata = avro.deserialize(read_instant(storage, clean), "HoodieCleanMetadata", where)
        last_clean = (clean.timestamp, int(metadata.get("totalFilesDeleted") or 0), retained)
    blocked = None
    if spec.archive.enabled:
        plan = plan_archive(storage, ArchiveConfig.from_conf(spec.archive.conf), timeline)
        if plan.blocked_by and plan.boundary and plan.blocked_by.startswith(_BLOCKING_GUARDS):
            blocked = (plan.blocked_by, plan.boundary)
    refused, refusal = refusals(storage, spec, props, timeline)
    last_archival = latest_archival(storage, props.archive_folder)
    in_utc = props.get(TIMELINE_TIMEZONE) == "UTC"
    return Observation(timeline, last_clean, last_archival, blocked, refused, refusal, in_utc)


def refusals(
    storage: Storage, spec: TableSpec, props: TableProperties, timeline: Timeline
) -> tuple[frozenset[Service], str | None]:
    """The enabled services that would refuse this table (as the cleaner and the archiver check
    it, and as ``tidemark compact --conf`` does with the compaction's conf: its
    ``hoodie.metadata.enable=false`` disables a metadata table first), and the refusal's words."""
    refused: dict[Service, str] = {}
    for service in spec.services():
        conf = service.conf if service.service is Service.COMPACTION else {}
        try:
            if service.enabled:
                writes_rows = service.service is Service.COMPACTION
                check_change(storage, conf, _COMMANDS[service.service], props, timeline, writes_rows)
        except _REFUSALS as e:
            refused[service.service] = str(e)
    if not refused:
        return frozenset(), None
    try:  # said once for them all: each is refused for the first reason the same checks find
        commands = " or ".join(_COMMANDS[s] for s in refused)
        check_changeable(storage, commands, props, timeline, writes_rows=Service.COMPACTION in refused)
    except _REFUSALS as e:
        return frozenset(refused), str(e)
    return frozenset(refused), next(iter(refused.values()))


@dataclass
class EventMemory:
    """The latest completed, skipped and conflict events of one table, as the operator consumed them."""

    latest: dict[EventType, TimelineEvent] = field(default_factory=dict)

    def remember(self, event: TimelineEvent) -> bool:
        """Keep ``event`` if it is newer than the one of its type kept; whether it was."""
        kept = self.latest.get(event.type)
        if kept is not None and (kept.time, kept.instant) >= (event.time, event.instant):
            return False
        self.latest[event.type] = event
        return True


_DONE_TYPES = {
    Service.CLEAN: EventType.CLEAN_COMPLETED,
    Service.ARCHIVE: EventType.ARCHIVE_COMPLETED,
}
_SKIPPED_TYPES = {
    Service.CLEAN: EventType.CLEAN_SKIPPED,
    Service.ARCHIVE: EventType.ARCHIVE_SKIPPED,
}


def facts(observation: Observation, events: EventMemory) -> TableFacts:
    """What the scheduler needs, from one observation and the events seen."""
    timeline = observation.timeline
    completed = timeline.completed()
    last_clean = completed.of_actions(CLEAN).last()
    after_clean = tuple(
        i.timestamp for i in completed.write_instants() if last_clean is None or i.timestamp > last_clean.timestamp
    )
    last_compaction = timeline.of_actions(COMPACTION).last()
    delta_commits = tuple(
        i.timestamp
        for i in completed.of_actions(DELTA_COMMIT)
        if last_compaction is None or i.timestamp > last_compaction.timestamp
    )
    done: dict[Service, datetime] = {}
    if last_clean is not None:
        done[Service.CLEAN] = time_of(last_clean.timestamp)
    last_compacted = completed.of_actions(COMPACTION).last()
    if last_compacted is not None:
        done[Service.COMPACTION] = time_of(last_compacted.timestamp)
    for service, type_ in _DONE_TYPES.items():
        event = events.latest.get(type_)
        if event is not None:
            done[service] = max(done.get(service, event.time), event.time)
    answered = {s: e.instant for s, t in _SKIPPED_TYPES.items() if (e := events.latest.get(t)) is not None}
    return TableFacts(after_clean, delta_commits, done, answered=answered, instants_in_utc=observation.instants_in_utc)


def _iso(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _reason(text: str) -> str:
    """A condition reason (CamelCase, as Kubernetes asks) from a guard's words."""
    return "".join(w.capitalize() for w in re.findall(r"[A-Za-z0-9]+", text)) or "Unknown"


def condition(kind: str, true: bool, reason: str, message: str) -> dict[str, str]:
    return {"type": kind, "status": "True" if true else "False", "reason": reason, "message": message}


def merge_conditions(
    old: Sequence[Mapping[str, Any]], new: Sequence[Mapping[str, str]], now: datetime, generation: int | None
) -> list[dict[str, Any]]:
    """``new`` with each condition's lastTransitionTime kept from ``old`` unless its status changed."""
    before = {c.get("type"): c for c in old}
    merged = []
    for c in new:
        previous = before.get(c["type"])
        changed = previous is None or previous.get("status") != c["status"]
        since = _iso(now) if changed or not previous else previous.get("lastTransitionTime", _iso(now))
        entry: dict[str, Any] = {**c, "lastTransitionTime": since}
        if generation is not None:
            entry["observedGeneration"] = generation
        merged.append(entry)
    return merged


def table_status(
    spec: TableSpec,
    observation: Observation,
    events: EventMemory,
    decision: Decision,
    requests: Mapping[Service, LastRequest],
    compaction_job: Mapping[str, Any] | None = None,
    job_refused: str | None = None,
) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """The status fields (without conditions) and the conditions, of a readable table;
    ``job_refused``: why the API server refused the last compaction Job the operator made."""
    timeline = observation.timeline
    seen = facts(observation, events)
    status: dict[str, Any] = {
        "activeTimelineLength": len(timeline),
        "pendingCompactions": len(timeline.pending().of_actions(COMPACTION)),
        "nextScheduled": {str(s): _iso(t) for s, t in decision.next_scheduled.items()},
        "requests": {str(s): request_status(replace(r, answer=answer(s, r, seen))) for s, r in requests.items()},
    }
    if (latest := timeline.last()) is not None:
        status["latestInstant"] = latest.timestamp
    if observation.last_clean is not None:
        instant, deleted, retained = observation.last_clean
        status["lastClean"] = {"instant": instant, "time": _iso(time_of(instant)), "filesDeleted": deleted}
        if retained:
            status["lastClean"]["earliestCommitToRetain"] = retained
    archived = events.latest.get(EventType.ARCHIVE_COMPLETED)
    if observation.last_archival or archived is not None:
        last: dict[str, Any] = {}
        if observation.last_archival:
            last = {"instant": observation.last_archival[-1], "instantsArchived": len(observation.last_archival)}
        if archived is not None and archived.instant >= last.get("instant", ""):
            last = {
                "instant": archived.instant,
                "time": _iso(archived.time),
                "instantsArchived": int(archived.extra.get("instantsArchived") or 0),
            }
            if archived.extra.get("stoppedBy"):
                last["stoppedBy"] = archived.extra["stoppedBy"]
        status["lastArchive"] = last
    compacted = timeline.completed().of_actions(COMPACTION).last()
    compaction: dict[str, Any] = {}
    if compacted is not None:
        compaction = {"instant": compacted.timestamp, "time": _iso(time_of(compacted.timestamp))}
    failed = None
    if compaction_job is not None and not compaction_job.get("active"):
        # a running Job has made no compaction yet: the one shown is an earlier Job's
        compaction["job"] = compaction_job["name"]
        if compaction_job.get("failed"):
            why = f" ({compaction_job['reason']})" if compaction_job.get("reason") else ""
            said = compaction_job.get("message") or "see its pods"
            failed = f"compaction Job {compaction_job['name']} failed{why}: {said}"
            compaction.update(failed=True, message=failed)
    if compaction:
        status["lastCompaction"] = compaction
    conflict = events.latest.get(EventType.WRITE_CONFLICTED)
    if conflict is not None:
        status["lastConflict"] = {
            "instant": conflict.instant,
            "time": _iso(conflict.time),
            "message": conflict.extra.get("message", ""),
        }
    # a refusal first: a Job's failure may be that refusal, and no request goes out until it clears
    problem = ("CompactionFailed", failed) if failed is not None else None
    if job_refused is not None:  # newer than any Job's failure: no Job was made since
        problem = ("JobRefused", job_refused)
    if observation.refusal:
        problem = ("ChangeRefused", observation.refusal)
    if problem is None:
        conditions = [
            condition(READY, True, "TableRead", f"the timeline of {spec.location} was read"),
            condition(DEGRADED, False, "AsSpecified", "the spec is valid and the table readable"),
        ]
    else:
        conditions = [condition(READY, False, *problem), condition(DEGRADED, True, *problem)]
    if observation.archival_blocked is not None:
        guard, boundary = observation.archival_blocked
        conditions.append(
            condition(ARCHIVAL_BLOCKED, True, _reason(guard), f"archival is held before {boundary} by the {guard}")
        )
    else:
        conditions.append(condition(ARCHIVAL_BLOCKED, False, "NotBlocked", "no guard holds archival back"))
    status["phase"] = "Suspended" if spec.suspend else ("Degraded" if problem else "Ready")
    return status, conditions


def degraded(reason: str, message: str) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """Status and conditions of a table that cannot be scheduled (a bad spec, storage out of reach)."""
    return {"phase": "Degraded"}, [
        condition(READY, False, reason, message),
        condition(DEGRADED, True, reason, message),
    ]


def request_status(request: LastRequest) -> dict[str, str]:
    at = request.requested_at.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    out = {"instant": request.instant, "requestedAt": at, "trigger": request.trigger}
    if request.job:
        out["job"] = request.job
    if request.answer:
        out["answer"] = request.answer
    return out


def last_requests(status: Mapping[str, Any] | None) -> dict[Service, LastRequest]:
    """The last requests recorded in a status (what survives a restart); malformed entries are
    ignored: they were not written by this operator."""
    found: dict[Service, LastRequest] = {}
    for name, raw in ((status or {}).get("requests") or {}).items():
        try:
            service = Service(name)
            at = datetime.fromisoformat(str(raw["requestedAt"]).replace("Z", "+00:00"))
            found[service] = LastRequest(
                str(raw["instant"]), at, str(raw.get("trigger", "")), raw.get("job"), _answer(raw.get("answer"))
            )
        except (KeyError, ValueError, TypeError):
            continue
    return found


def _answer(recorded: Any) -> str | None:
    return recorded if recorded in ("completed", "skipped") else None
