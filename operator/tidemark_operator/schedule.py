"""Which requests are due: a pure function of a table's spec, what its timeline says, the last
request of each service, and the time.

Every request is identified by its **instant**: for a time trigger the fire time (cron, or a
multiple of the interval since the epoch) as a Hudi instant time, for a commit trigger the commit
that made the service due. Both are the same in every replica and after every restart, so two
operators deciding at once, or one deciding again after a crash, make the same request, with the
same CloudEvents id (:func:`tidemark.events.event_id` hashes the table, the type and the instant)
and the same compaction Job name: a repeated request is recognisable and harmless.

Missed fire times collapse into one request for the latest (as a CronJob without
``startingDeadlineSeconds`` would do after a long outage), and a fire time before the resource
was created never counts, so a new resource is not requested at once for the past."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from tidemark.timeline.instant import new_instant_time
from tidemark_operator.spec import ConcurrencyPolicy, Service, ServiceSpec, TableSpec, Trigger

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class TableFacts:
    """What the scheduler needs to know of a table, read from its timeline (and events)."""

    #: completed write instants after the latest completed clean (the clean trigger counts them)
    commits_since_clean: tuple[str, ...] = ()
    #: completed delta commits after the latest compaction of any state (Hudi's NUM_COMMITS)
    delta_commits_since_compaction: tuple[str, ...] = ()
    #: per service, the latest time it was seen done: its latest completed instant on the
    #: timeline, or its latest ``*.completed`` event
    last_done: Mapping[Service, datetime] = field(default_factory=dict)
    #: the compaction Job of the last request still runs
    compaction_job_active: bool = False
    #: per service, the latest request instant it answered with nothing to do (``*.skipped``)
    answered: Mapping[Service, str] = field(default_factory=dict)
    #: whether the table's instant times are UTC (see ``status.Observation.instants_in_utc``)
    instants_in_utc: bool = True


@dataclass(frozen=True)
class LastRequest:
    """The last request made for a service, as recorded in the resource's status."""

    instant: str
    requested_at: datetime
    trigger: str = ""
    job: str | None = None
    #: how the service answered it (``completed`` or ``skipped``), once seen: kept in the status,
    #: since a ``*.skipped`` leaves nothing on the timeline and a restarted operator (or a new
    #: leader) reads the topic from its end
    answer: str | None = None


@dataclass(frozen=True)
class Request:
    service: Service
    #: the request's identity (see the module's doc): a Hudi instant time
    instant: str
    #: why: ``schedule`` (cron or interval) or ``commits``
    trigger: str
    #: the fire time for a time trigger; None for a commit trigger
    due: datetime | None


@dataclass(frozen=True)
class Decision:
    requests: tuple[Request, ...]
    #: services that were due but held back, and why
    held: Mapping[Service, str]
    #: the next fire time of each time-triggered service (None when suspended)
    next_scheduled: Mapping[Service, datetime]
    #: every request due and not made yet, whether in ``requests`` or held back
    due: Mapping[Service, Request] = field(default_factory=dict)
    #: the resource's creation: no request could be made before it
    created: datetime = _EPOCH
    #: when it was decided, and whether the table's instant times are UTC
    decided_at: datetime = _EPOCH
    instants_in_utc: bool = True

    def overdue_since(self, service: Service) -> datetime | None:
        """Since when ``service`` has a due request that is held back (suspended: never, that is
        asked for); None when it has none. A commit trigger counts from the commit, or from the
        resource's creation when that came later (a table written long before it was scheduled).
        A commit of a table whose writers stamp their local time (Hudi's default) is no time the
        operator can place: it counts from now, and the caller keeps the first look that saw it."""
        request = self.due.get(service)
        if request is None or self.held.get(service) == "suspended":
            return None
        if request.due is None and not self.instants_in_utc:
            return self.decided_at
        return request.due or max(time_of(request.instant), self.created)


def instant_of(t: datetime) -> str:
    """The Hudi instant time (``yyyyMMddHHmmssSSS``, UTC) of ``t``."""
    return new_instant_time(t.astimezone(UTC))


def time_of(instant: str) -> datetime:
    """The UTC time of a Hudi instant time (14 or 17 digits)."""
    t = datetime.strptime(instant[:14], "%Y%m%d%H%M%S").replace(tzinfo=UTC)
    return t + timedelta(milliseconds=int(instant[14:17] or 0))


def last_fire(trigger: Trigger, now: datetime) -> datetime | None:
    """The latest fire time of a time trigger at or before ``now``."""
    fires = []
    if trigger.cron is not None:
        fires.append(trigger.cron.last_at_or_before(now))
    if trigger.interval is not None:
        step = trigger.interval
        fires.append(_EPOCH + step * ((now - _EPOCH) // step))
    return max(fires) if fires else None


def next_fire(trigger: Trigger, now: datetime) -> datetime | None:
    """The first fire time of a time trigger after ``now``."""
    fires = []
    if trigger.cron is not None:
        fires.append(trigger.cron.next_after(now))
    if trigger.interval is not None:
        step = trigger.interval
        fires.append(_EPOCH + step * ((now - _EPOCH) // step + 1))
    return min(fires) if fires else None


def _candidate(
    service: ServiceSpec, facts: TableFacts, previous: LastRequest | None, created: datetime, now: datetime
) -> Request | None:
    """The newest request the triggers ask for now (whether made already or not). A commit
    trigger counts the commits since the service last ran and since its last request: a request
    the service had nothing to do for writes no instant, and the count goes on from it."""
    found: list[Request] = []
    fire = last_fire(service.trigger, now)
    if fire is not None and fire > created:
        found.append(Request(service.service, instant_of(fire), "schedule", fire))
    n = service.trigger.commits
    if n is not None:
        commits = (
            facts.delta_commits_since_compaction
            if service.service is Service.COMPACTION
            else facts.commits_since_clean
            if service.service is Service.CLEAN
            else ()
        )
        if previous is not None:
            commits = tuple(c for c in commits if c > previous.instant)
        if len(commits) >= n:
            found.append(Request(service.service, commits[n - 1], "commits", None))
    return max(found, key=lambda r: r.instant, default=None)


def answer(service: Service, last: LastRequest, facts: TableFacts) -> str | None:
    """How ``last`` was answered: ``completed`` (the service done since it was made), ``skipped``
    (handled with nothing to do), as recorded before or as ``facts`` show now; None if not yet."""
    done = facts.last_done.get(service)
    if done is not None and done >= last.requested_at:
        return "completed"
    if facts.answered.get(service, "") >= last.instant:
        return "skipped"
    return last.answer


def pending(
    service: Service, last: LastRequest | None, facts: TableFacts, timeout: timedelta, now: datetime
) -> str | None:
    """Why the last request of ``service`` still counts as pending (None when it does not): its
    compaction Job runs, or nothing has answered it yet (a ``*.completed`` since it was made, or a
    ``*.skipped`` for it, or the answer the status records) and it is younger than ``timeout``."""
    if last is None:
        return None
    if service is Service.COMPACTION and last.job is not None:
        return f"compaction Job {last.job} is still running" if facts.compaction_job_active else None
    if answer(service, last, facts) is not None:
        return None
    if now - last.requested_at >= timeout:
        return None  # its answer was lost, or the service is down: the request has lapsed
    return f"the {service} request of {last.instant} is not answered yet"


def decide(
    spec: TableSpec,
    facts: TableFacts,
    last: Mapping[Service, LastRequest],
    created: datetime,
    now: datetime,
) -> Decision:
    """The requests due now, the services held back, and the next fire times."""
    requests: list[Request] = []
    held: dict[Service, str] = {}
    next_scheduled: dict[Service, datetime] = {}
    due: dict[Service, Request] = {}
    for service in spec.services():
        if not service.enabled:
            continue
        if not spec.suspend and (upcoming := next_fire(service.trigger, now)) is not None:
            next_scheduled[service.service] = upcoming
        previous = last.get(service.service)
        candidate = _candidate(service, facts, previous, created, now)
        if candidate is None or (previous is not None and candidate.instant <= previous.instant):
            continue  # nothing due, or made already (by this replica, another, or before a restart)
        due[service.service] = candidate
        if spec.suspend:
            held[service.service] = "suspended"
            continue
        if spec.concurrency_policy is ConcurrencyPolicy.FORBID:
            why = pending(service.service, previous, facts, spec.request_timeout, now)
            if why is not None:
                held[service.service] = why
                continue
        requests.append(candidate)
    return Decision(tuple(requests), held, next_scheduled, due, created, now, facts.instants_in_utc)
