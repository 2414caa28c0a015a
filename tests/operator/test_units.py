"""The operator's pure parts: the spec, cron, scheduling decisions, status, the compaction Job, the
request events; and the CRD with its example (validated against the CRD's own schema)."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from kubernetes_validate import utils as kubernetes_schemas

from tests.support.table_builder import TableBuilder
from tidemark.errors import BrokerUnavailableError
from tidemark.events import EventType, TimelineEvent, decode, encode
from tidemark.kafka_adapter import RawMessage
from tidemark.storage import open_storage
from tidemark.table.compaction import compact
from tidemark_operator.cron import CronError, CronSchedule
from tidemark_operator.handlers import EventListener, OperatorConfig, OperatorMetrics, request_event
from tidemark_operator.jobs import compaction_job, job_name, table_label
from tidemark_operator.schedule import LastRequest, Request, TableFacts, decide, instant_of, time_of
from tidemark_operator.spec import MAX_PERIOD, ConcurrencyPolicy, Service, SpecError, parse_spec
from tidemark_operator.status import (
    EventMemory,
    degraded,
    facts,
    last_requests,
    merge_conditions,
    observe,
    request_status,
    table_status,
)

CHART = Path(__file__).resolve().parents[2] / "charts" / "tidemark"
T0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
CREATED = T0 - timedelta(hours=1)
LOCATION = "s3://lake/warehouse/orders"


def spec(**kw: Any) -> dict[str, Any]:
    return {
        "location": LOCATION,
        "compaction": {"enabled": False},
        "clean": {"interval": "1h"},
        "archive": {"enabled": False},
        **kw,
    }


# --- spec ----------------------------------------------------------------------------------------


def test_a_full_spec_parses_into_hudi_keys() -> None:
    parsed = parse_spec(yaml.safe_load((CHART / "examples" / "hudi-table.yaml").read_text())["spec"])
    assert parsed.location == LOCATION
    assert parsed.concurrency_policy is ConcurrencyPolicy.FORBID
    assert parsed.clean.conf["hoodie.cleaner.policy"] == "KEEP_LATEST_BY_HOURS"
    assert parsed.clean.conf["hoodie.cleaner.hours.retained"] == "24"
    assert parsed.archive.conf["hoodie.keep.max.commits"] == "30"
    assert parsed.archive.trigger.interval == timedelta(hours=6)
    assert parsed.compaction.trigger.commits == 5
    assert parsed.credentials is not None
    assert parsed.credentials.name == "s3-keys"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"location": "lake/orders"}, r"spec\.location: 'lake/orders' is neither s3://"),
        ({"clean": {"interval": "5 minutes"}}, r"spec\.clean\.interval: '5 minutes' is not a period"),
        ({"clean": {"schedule": "61 * * * *"}}, r"spec\.clean\.schedule: the minute field '61' is outside 0-59"),
        ({"clean": {"schedule": "* * *"}}, r"has 3 fields; a cron schedule has 5"),
        ({"clean": {"interval": "1h", "retention": 3}}, r"spec\.clean: unknown field retention"),
        ({"colour": "blue"}, r"spec: unknown field colour"),
        ({"conf": {"spark.executor.memory": "4g"}}, r"spec\.conf: unknown key 'spark\.executor\.memory'"),
        (
            {"compaction": {"conf": {"tidemark.kafka.sasl.password": "x"}}},
            r"spec\.compaction\.conf\.tidemark\.kafka\.sasl\.password: names a secret",
        ),
        (
            {"archive": {"keepMinCommits": 30, "keepMaxCommits": 20, "interval": "1h"}},
            r"spec\.archive: hoodie\.keep\.min\.commits \(30\) must be positive and below hoodie\.keep\.max\.commits",
        ),
        (
            {"clean": {"commitsRetained": 5, "interval": "1h"}, "conf": {"hoodie.cleaner.commits.retained": "7"}},
            r"spec\.conf\.hoodie\.cleaner\.commits\.retained: contradicts spec\.clean\.commitsRetained",
        ),
        ({"clean": {"enabled": True}}, r"spec\.clean: enabled but never due"),
        ({"concurrencyPolicy": "Replace"}, r"spec\.concurrencyPolicy: must be Forbid or Allow"),
        ({"conf": {"hoodie.keep.min.commits": 5}}, r"must be a string \(quote it\)"),
        # periods the CRD's pattern takes but no date arithmetic can hold
        ({"clean": {"interval": "3000000d"}}, r"spec\.clean\.interval: '3000000d' is too long \(at most 365 days\)"),
        ({"archive": {"interval": "100000000000d"}}, r"spec\.archive\.interval: '100000000000d' is too long"),
        ({"compaction": {"interval": "9" * 5000 + "ms"}}, r"spec\.compaction\.interval: '9999.* is too long"),
        ({"clean": {"interval": "366d"}}, r"spec\.clean\.interval: '366d' is too long"),
        ({"requestTimeoutSeconds": 10**12}, r"spec\.requestTimeoutSeconds: 1000000000000 is too long"),
    ],
)
def test_a_bad_spec_says_what_is_wrong_and_where(change: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        parse_spec(spec(**change))


def test_the_longest_period_is_a_year() -> None:
    parsed = parse_spec(spec(clean={"interval": "365d"}, requestTimeoutSeconds=365 * 86400))
    assert parsed.clean.trigger.interval == parsed.request_timeout == timedelta(days=365)
    late = datetime(9000, 1, 1, tzinfo=UTC)
    assert decide(parsed, TableFacts(), {}, CREATED, late).next_scheduled[Service.CLEAN] > late


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec({"location": "x", "clean": {"interval": "soon"}, "suspend": "yes"})
    assert len(caught.value.problems) == 3, caught.value.problems
    only_location = parse_spec({"location": LOCATION})  # no trigger: nothing scheduled, not an error
    assert [s.enabled for s in only_location.services()] == [False, False, False]
    with pytest.raises(SpecError, match="spec: missing"):
        parse_spec(None)


# --- cron ----------------------------------------------------------------------------------------


def test_cron_fire_times() -> None:
    hourly = CronSchedule.parse("@hourly")
    assert hourly.last_at_or_before(T0 + timedelta(minutes=59)) == T0
    assert hourly.next_after(T0) == T0 + timedelta(hours=1)
    weekdays = CronSchedule.parse("30 9 * * 1-5")  # 2024-05-01 is a Wednesday
    assert weekdays.next_after(T0) == datetime(2024, 5, 2, 9, 30, tzinfo=UTC)
    assert weekdays.last_at_or_before(datetime(2024, 5, 6, 9, 0, tzinfo=UTC)) == datetime(2024, 5, 3, 9, 30, tzinfo=UTC)
    steps = CronSchedule.parse("*/15 0-1 1,15 * *")
    assert steps.next_after(T0) == datetime(2024, 5, 15, 0, 0, tzinfo=UTC)
    with pytest.raises(CronError, match="never fires"):
        CronSchedule.parse("0 0 30 2 *")


# --- scheduling ----------------------------------------------------------------------------------


def test_a_time_trigger_requests_its_latest_fire_time_once() -> None:
    parsed = parse_spec(spec())
    first = decide(parsed, TableFacts(), {}, CREATED, T0 + timedelta(minutes=10))
    (request,) = first.requests
    assert (request.service, request.instant, request.trigger) == (Service.CLEAN, "20240501120000000", "schedule")
    assert first.next_scheduled[Service.CLEAN] == T0 + timedelta(hours=1)
    # made already (by this replica, another one, or before a restart): nothing more
    made = {Service.CLEAN: LastRequest(request.instant, T0 + timedelta(minutes=10))}
    answered = TableFacts(last_done={Service.CLEAN: T0 + timedelta(minutes=11)})
    assert decide(parsed, answered, made, CREATED, T0 + timedelta(minutes=30)).requests == ()
    # fire times missed while down collapse into one request for the latest
    later = decide(parsed, answered, made, CREATED, T0 + timedelta(hours=5, minutes=1)).requests
    assert [r.instant for r in later] == ["20240501170000000"]


def test_no_request_for_a_fire_time_before_the_resource_existed() -> None:
    parsed = parse_spec(spec())
    assert decide(parsed, TableFacts(), {}, T0 + timedelta(minutes=5), T0 + timedelta(minutes=10)).requests == ()


def test_suspend_holds_every_request_and_resume_makes_the_latest() -> None:
    suspended = parse_spec(spec(suspend=True))
    decision = decide(suspended, TableFacts(), {}, CREATED, T0 + timedelta(minutes=1))
    assert decision.requests == ()
    assert decision.held == {Service.CLEAN: "suspended"}
    assert decision.next_scheduled == {}
    resumed = decide(parse_spec(spec()), TableFacts(), {}, CREATED, T0 + timedelta(minutes=1))
    assert [r.instant for r in resumed.requests] == ["20240501120000000"]


def test_forbid_waits_for_the_previous_request_of_the_service() -> None:
    parsed = parse_spec(spec(requestTimeoutSeconds=7200))
    previous = {Service.CLEAN: LastRequest("20240501110000000", T0 - timedelta(hours=1))}
    held = decide(parsed, TableFacts(), previous, CREATED - timedelta(hours=1), T0)
    assert held.requests == ()
    assert "not answered yet" in held.held[Service.CLEAN]
    # answered by a clean on the timeline (or a clean.completed event) after the request
    done = TableFacts(last_done={Service.CLEAN: T0 - timedelta(minutes=59)})
    assert [r.instant for r in decide(parsed, done, previous, CREATED, T0).requests] == ["20240501120000000"]
    # Allow does not wait; and an unanswered request lapses after requestTimeoutSeconds
    allow = parse_spec(spec(concurrencyPolicy="Allow"))
    assert len(decide(allow, TableFacts(), previous, CREATED, T0).requests) == 1
    short = parse_spec(spec(requestTimeoutSeconds=60))
    assert len(decide(short, TableFacts(), previous, CREATED, T0).requests) == 1


def test_a_running_compaction_job_holds_the_next_compaction() -> None:
    parsed = parse_spec(spec(compaction={"deltaCommits": 2}, clean={"enabled": False}))
    commits = ("20240501100000000", "20240501103000000", "20240501110000000")
    first = decide(parsed, TableFacts(delta_commits_since_compaction=commits[:1]), {}, CREATED, T0)
    assert first.requests == ()  # one delta commit of two
    (request,) = decide(parsed, TableFacts(delta_commits_since_compaction=commits), {}, CREATED, T0).requests
    assert (request.instant, request.trigger) == (commits[1], "commits")  # the commit that made it due
    running = {Service.COMPACTION: LastRequest("20240501090000000", T0, "commits", job="orders-compact-1")}
    facts = TableFacts(delta_commits_since_compaction=commits, compaction_job_active=True)
    assert "still running" in decide(parsed, facts, running, CREATED, T0).held[Service.COMPACTION]
    finished = TableFacts(delta_commits_since_compaction=commits, compaction_job_active=False)
    assert len(decide(parsed, finished, running, CREATED, T0).requests) == 1


def test_the_clean_commit_trigger() -> None:
    parsed = parse_spec(spec(clean={"commits": 3}))
    commits = ("20240501100000000", "20240501103000000", "20240501110000000", "20240501113000000")
    (request,) = decide(parsed, TableFacts(commits_since_clean=commits), {}, CREATED, T0).requests
    assert request.instant == commits[2]


def test_a_commit_trigger_counts_again_from_a_request_that_found_nothing_to_do() -> None:
    # a clean or compaction with nothing to do writes no instant: the commits since the last run
    # keep growing, and the trigger counts from its last request instead (it requested once, then
    # never again, and the table stopped being cleaned)
    commits = tuple(f"2024050110{m:02d}00000" for m in range(9))
    for field, key in (("commits", "commits_since_clean"), ("deltaCommits", "delta_commits_since_compaction")):
        service = Service.CLEAN if field == "commits" else Service.COMPACTION
        name = "clean" if field == "commits" else "compaction"
        parsed = parse_spec(spec(**{name: {field: 2}}, **({} if name == "clean" else {"clean": {"enabled": False}})))
        answered = {service: LastRequest(commits[1], T0, "commits")}  # requested at the 2nd, nothing done
        one_more = decide(parsed, TableFacts(**{key: commits[:3]}), answered, CREATED, T0)
        assert service not in one_more.due
        again = decide(parsed, TableFacts(**{key: commits}), answered, CREATED, T0).due[service]
        assert again.instant == commits[3]  # (held under Forbid until the first request lapses)


# --- the request, its id and its Job ---------------------------------------------------------------


def test_a_repeated_request_has_the_same_id_and_job() -> None:
    parsed = parse_spec(spec(compaction={"deltaCommits": 1, "resources": {"limits": {"memory": "2Gi"}}}))
    request = Request(Service.COMPACTION, "20240501120000000", "commits", None)
    first = request_event(parsed, request, "lake/orders", T0)
    again = request_event(parsed, request, "lake/orders", T0 + timedelta(minutes=3))  # another replica, later
    assert first.id == again.id
    assert first.type is EventType.COMPACTION_REQUESTED
    assert decode(*encode(first)) == first  # on the wire as the services' events are
    assert job_name("orders", first.id) == job_name("orders", again.id) == f"orders-compact-{first.id[:10]}"
    job = compaction_job(
        parsed,
        resource="orders",
        namespace="lake",
        name="orders",
        request_id=first.id,
        instant=request.instant,
        image="tidemark:1",
        service_account="compactor",
        ttl_seconds=60,
        owner={"apiVersion": "tidemark.io/v1alpha1", "kind": "HudiTable", "name": "orders", "uid": "u"},
    )
    kubernetes_schemas.validate(job, "1.30", strict=True)
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["tidemark"]
    assert container["args"][:2] == ["compact", LOCATION]
    # no sparkMaster in the spec: the chart's image has no Spark, the Job compacts in its process
    assert container["args"][container["args"].index("--engine") + 1] == "local"
    # the spec's memory limit, the defaults for what it does not name (none for memory: a default
    # request above the spec's limit would make the pod invalid)
    assert container["resources"] == {"requests": {"cpu": "500m"}, "limits": {"cpu": "2", "memory": "2Gi"}}
    assert job["spec"]["template"]["spec"]["volumes"] == [{"name": "tmp", "emptyDir": {"sizeLimit": "2Gi"}}]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert len(job_name("x" * 80, first.id)) <= 63


@pytest.mark.parametrize(
    "typed",
    ["s3a://lake/warehouse/orders", "s3://lake/warehouse//orders", "s3://lake/warehouse/./orders/"],
)
def test_a_table_spelt_otherwise_is_requested_and_answered_under_its_canonical_location(typed: str) -> None:
    """A spec spelling its table as the write job does not (``s3a://``, ``//``, ``/./``) sent its
    requests under another Kafka key than the table's other events (another partition, another
    order, other ce_ids), and looked for the answers under that spelling: a clean.completed of a
    clean that a write triggered was never seen as done."""
    parsed = parse_spec(spec(location=typed))
    request = request_event(parsed, Request(Service.CLEAN, "20240501120000000", "schedule", None), "lake/orders", T0)
    write = TimelineEvent(EventType.INSTANT_COMPLETED, LOCATION, "20240501115900000", "commit", "COMPLETED")
    assert encode(request)[0] == encode(write)[0] == LOCATION.encode()
    # answered by the cleaner (under the canonical location), and by an older one echoing the
    # request's spelling: both are this table's
    listener = EventListener(OperatorConfig("127.0.0.1:9"), OperatorMetrics())
    for offset, (table, instant) in enumerate([(LOCATION, "20240501120000100"), (typed, "20240501120000200")]):
        done = TimelineEvent(EventType.CLEAN_COMPLETED, table, instant, "clean", "COMPLETED", time=T0)
        key, value, headers = encode(done)
        listener.consume(RawMessage("tidemark.timeline", 0, offset, key, value, tuple(headers)))
    assert listener.take_changed(request.table)
    assert listener.memory(request.table).latest[EventType.CLEAN_COMPLETED].instant == "20240501120000200"
    # what the user reads (kubectl's Location column is the spec's own) keeps the spec's spelling
    assert parsed.location == typed.rstrip("/")


# --- status --------------------------------------------------------------------------------------


def test_conditions_keep_their_transition_time_until_their_status_changes() -> None:
    _, bad = degraded("InvalidSpec", "spec.clean.interval: 'soon' is not a period")
    first = merge_conditions([], bad, T0, 3)
    assert {c["type"]: c["status"] for c in first} == {"Ready": "False", "Degraded": "True"}
    same = merge_conditions(first, bad, T0 + timedelta(minutes=5), 3)
    assert [c["lastTransitionTime"] for c in same] == ["2024-05-01T12:00:00Z"] * 2
    assert all(c["observedGeneration"] == 3 for c in same)


def test_requests_survive_a_round_trip_through_the_status() -> None:
    made = LastRequest("20240501120000000", T0 + timedelta(milliseconds=250), "schedule", "orders-compact-1")
    assert last_requests({"requests": {"compaction": request_status(made), "bogus": {"instant": 1}}}) == {
        Service.COMPACTION: made
    }
    assert time_of(instant_of(made.requested_at)) == made.requested_at


def test_a_skipped_answer_is_kept_in_the_status_for_a_restart(tmp_path: Path) -> None:
    """A ``*.skipped`` leaves nothing on the timeline: the status records it with the request, and
    a restarted operator (no event seen yet) reads it back and holds nothing under Forbid."""
    location = str(tmp_path / "orders")
    TableBuilder(open_storage(location)).insert(["a", "b"])
    parsed = parse_spec({"location": location, "clean": {"interval": "1m"}, "archive": {"interval": "1m"}})
    made = {
        Service.CLEAN: LastRequest("20240501115900000", T0 - timedelta(minutes=1), "schedule"),
        Service.ARCHIVE: LastRequest("20240501115900000", T0 - timedelta(minutes=1), "schedule"),
    }
    events = EventMemory()
    skip = TimelineEvent(EventType.CLEAN_SKIPPED, location, "20240501115900000", "clean", "SKIPPED", time=T0)
    events.remember(skip)
    observation = observe(open_storage(location), parsed)
    decision = decide(parsed, facts(observation, events), made, CREATED, T0)
    fields, _ = table_status(parsed, observation, events, decision, made)
    assert fields["requests"]["clean"]["answer"] == "skipped"
    assert "answer" not in fields["requests"]["archive"]  # no archive.skipped seen: not answered
    # restarted: no event seen, what the status says is all it knows
    restarted = decide(parsed, facts(observation, EventMemory()), last_requests(fields), CREATED, T0)
    assert [r.service for r in restarted.requests] == [Service.CLEAN]
    assert "not answered yet" in restarted.held[Service.ARCHIVE]
    # and the answer stays in the status while the request is the last one
    again = table_status(parsed, observation, EventMemory(), restarted, last_requests(fields))[0]
    assert again["requests"]["clean"]["answer"] == "skipped"
    assert last_requests({"requests": {"clean": {**again["requests"]["clean"], "answer": "bogus"}}}) == {
        Service.CLEAN: made[Service.CLEAN]
    }  # an answer this operator did not write is none
    # declared in the CRD: the API server prunes what a structural schema does not declare
    status_schema = openapi_schema()["properties"]["status"]
    assert "answer" in status_schema["properties"]["requests"]["additionalProperties"]["properties"]
    assert list(jsonschema.Draft7Validator(_as_jsonschema(status_schema)).iter_errors(fields)) == []


def test_only_newer_events_are_remembered() -> None:
    from tidemark.events import TimelineEvent

    memory = EventMemory()
    new = TimelineEvent(EventType.CLEAN_COMPLETED, LOCATION, "20240501120000000", "clean", "COMPLETED", time=T0)
    old = TimelineEvent(EventType.CLEAN_COMPLETED, LOCATION, "20240501110000000", "clean", "COMPLETED", time=T0)
    assert memory.remember(new)
    assert not memory.remember(old)
    assert not memory.remember(new)  # a duplicate


# --- the CRD ---------------------------------------------------------------------------------------


def crd() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((CHART / "crds" / "hudi-table.yaml").read_text())
    return loaded


def openapi_schema() -> dict[str, Any]:
    (version,) = crd()["spec"]["versions"]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


def _as_jsonschema(node: Any) -> Any:
    """The CRD's OpenAPI schema as JSON Schema (its x-kubernetes-int-or-string as a type union)."""
    if isinstance(node, dict):
        out = {k: _as_jsonschema(v) for k, v in node.items() if not k.startswith("x-kubernetes-")}
        if node.get("x-kubernetes-int-or-string"):
            out["type"] = ["integer", "string"]
        return out
    if isinstance(node, list):
        return [_as_jsonschema(v) for v in node]
    return node


def _structural_problems(node: dict[str, Any], where: str = "") -> list[str]:
    """What makes a schema non-structural: a node without a type (unless int-or-string or
    preserving unknown fields), or an object with neither properties nor additionalProperties."""
    problems = []
    if "type" not in node and not node.get("x-kubernetes-int-or-string"):
        problems.append(f"{where or '.'}: no type")
    declared = {"properties", "additionalProperties", "x-kubernetes-preserve-unknown-fields"} & set(node)
    if node.get("type") == "object" and not declared and where != ".metadata":
        problems.append(f"{where}: an object with no fields declared")
    for key, child in (node.get("properties") or {}).items():
        problems += _structural_problems(child, f"{where}.{key}")
    if isinstance(node.get("additionalProperties"), dict):
        problems += _structural_problems(node["additionalProperties"], f"{where}.*")
    if isinstance(node.get("items"), dict):
        problems += _structural_problems(node["items"], f"{where}[]")
    return problems


def test_the_crd_is_valid_and_structural() -> None:
    definition = crd()
    kubernetes_schemas.validate(definition, "1.30", strict=True)
    assert definition["spec"]["names"]["shortNames"] == ["ht"]
    assert definition["spec"]["scope"] == "Namespaced"
    assert _structural_problems(openapi_schema()) == []
    (version,) = definition["spec"]["versions"]
    columns = [c["name"] for c in version["additionalPrinterColumns"]]
    assert columns == ["Location", "Phase", "Last Clean", "Last Archive", "Pending Compactions", "Age"]


def test_the_example_is_valid_against_the_crd_schema() -> None:
    example = yaml.safe_load((CHART / "examples" / "hudi-table.yaml").read_text())
    validator = jsonschema.Draft7Validator(_as_jsonschema(openapi_schema()))
    assert sorted(e.message for e in validator.iter_errors(example)) == []
    assert example["apiVersion"] == f"{crd()['spec']['group']}/v1alpha1"
    # and the check can fail: a misspelt policy, a period the pattern refuses
    bad = yaml.safe_load((CHART / "examples" / "hudi-table.yaml").read_text())
    bad["spec"]["clean"]["policy"] = "KEEP_EVERYTHING"
    bad["spec"]["archive"]["interval"] = "six hours"
    assert len(list(validator.iter_errors(bad))) == 2


def _as_stored(node: Any, schema: dict[str, Any]) -> Any:
    """``node`` as the API server stores it: a property's default is set wherever the object
    holding it is present and the property absent (structural defaulting); kmock sets none."""
    if not isinstance(node, dict):
        return node
    stored = dict(node)
    for name, child in (schema.get("properties") or {}).items():
        if name not in stored and "default" in child:
            stored[name] = child["default"]
        if name in stored:
            stored[name] = _as_stored(stored[name], child)
    return stored


@pytest.mark.parametrize(
    "settings",
    [
        {"clean": {"policy": "KEEP_LATEST_COMMITS", "commitsRetained": 10}, "compaction": {"deltaCommits": 5}},
        {"clean": {"interval": "1h"}, "archive": {"keepMinCommits": 20, "keepMaxCommits": 30}},
        {"clean": {"interval": "1h"}, "compaction": {"conf": {"hoodie.compaction.strategy": "x"}}},
        {"clean": {"interval": "1h"}, "storage": {"credentialsSecret": {"name": "s3-keys"}}},
    ],
)
def test_the_crds_defaults_change_nothing_the_operator_reads(settings: dict[str, Any]) -> None:
    # a section holding only settings is accepted and not scheduled, as written and as stored
    written = {"location": LOCATION, **settings}
    stored = _as_stored(written, openapi_schema()["properties"]["spec"])
    assert parse_spec(stored) == parse_spec(written)
    assert not parse_spec(stored).archive.enabled


def test_the_per_table_series_follow_what_the_timers_saw() -> None:
    """What the alerts look at: a held-back request's age, the ArchivalBlocked condition's age, the
    pending compactions, the Degraded reason; and nothing from a table no timer looked at lately,
    nor counts it (a replica paused by kopf's peering shows no frozen values)."""
    import time

    from prometheus_client import generate_latest

    from tests.support.services import metric_value
    from tidemark_operator.handlers import OperatorMetrics, _Seen
    from tidemark_operator.status import condition

    now = datetime.now(UTC)
    seen = _Seen(LOCATION, resource="lake/orders", ticked_at=time.monotonic(), pending_compactions=2)
    seen.observation = object()  # type: ignore[assignment]  # read: the table's series are shown
    seen.overdue_since[Service.CLEAN] = now - timedelta(minutes=10)
    blocked = {**condition("ArchivalBlocked", True, "Savepoint", "held"), "lastTransitionTime": "2024-05-01T12:00:00Z"}
    seen.shown([condition("Degraded", False, "AsSpecified", "ok"), blocked], "savepoint")
    broken = _Seen("/nowhere", resource="lake/broken", ticked_at=time.monotonic())
    broken.shown([condition("Degraded", True, "TableUnreachable", "cannot read")], None)
    stale = _Seen("/stale", resource="lake/stale", ticked_at=time.monotonic() - 3600, pending_compactions=9)
    stale.shown([condition("Degraded", True, "TableUnreachable", "cannot read")], None)
    metrics = OperatorMetrics(lambda: [seen, broken, stale], stale_s=60)
    text = generate_latest(metrics.registry).decode()

    def value(name: str, **labels: str) -> float | None:
        return metric_value(text, name, **labels)

    overdue = value("tidemark_operator_request_overdue_seconds", resource="lake/orders", table_service="clean")
    assert overdue is not None
    assert 600 <= overdue < 700
    assert value("tidemark_operator_request_overdue_seconds", resource="lake/orders", table_service="archive") == 0
    since = (now - datetime(2024, 5, 1, 12, tzinfo=UTC)).total_seconds()
    blocked_s = value("tidemark_operator_archival_blocked_seconds", resource="lake/orders", guard="savepoint")
    assert blocked_s is not None
    assert abs(blocked_s - since) < 60
    assert value("tidemark_operator_pending_compactions", resource="lake/orders", table=LOCATION) == 2
    assert value("tidemark_operator_table_degraded", resource="lake/orders") == 0
    assert value("tidemark_operator_table_degraded", resource="lake/broken", reason="TableUnreachable") == 1
    assert value("tidemark_operator_request_overdue_seconds", resource="lake/broken") is None
    assert value("tidemark_operator_pending_compactions", resource="lake/stale") is None
    assert value("tidemark_operator_table_degraded", resource="lake/stale") is None
    # the counts too: summed over the replicas, each table counts once
    assert value("tidemark_operator_tables_managed") == 2
    assert value("tidemark_operator_tables_degraded") == 1
    paused = OperatorMetrics(lambda: [stale], stale_s=60)
    text = generate_latest(paused.registry).decode()
    assert value("tidemark_operator_tables_managed") == 0
    assert value("tidemark_operator_tables_degraded") == 0


def test_a_held_request_is_overdue_since_its_due_time_and_a_suspended_one_never() -> None:
    parsed = parse_spec(spec(clean={"interval": "1h"}))
    last = {Service.CLEAN: LastRequest(instant_of(T0 - timedelta(hours=1)), T0 - timedelta(minutes=5))}
    held = decide(parsed, TableFacts(), last, CREATED - timedelta(hours=5), T0 + timedelta(minutes=1))
    assert held.requests == ()
    assert held.overdue_since(Service.CLEAN) == T0  # the fire time held back by Forbid
    assert held.overdue_since(Service.ARCHIVE) is None
    suspended = decide(
        parse_spec(spec(suspend=True)), TableFacts(), {}, CREATED - timedelta(hours=5), T0 + timedelta(minutes=1)
    )
    assert Service.CLEAN in suspended.due
    assert suspended.overdue_since(Service.CLEAN) is None
    # a compaction due from delta commits written long before the resource (a table Apache wrote,
    # now scheduled) is overdue since the resource was created, not since those commits
    compaction = parse_spec(spec(compaction={"deltaCommits": 1}))
    running = {Service.COMPACTION: LastRequest("20230101000000000", CREATED, "commits", job="orders-compact-1")}
    old_commits = TableFacts(delta_commits_since_compaction=("20230102000000000",), compaction_job_active=True)
    held_compaction = decide(compaction, old_commits, running, CREATED, T0)
    assert held_compaction.held.keys() == {Service.COMPACTION}
    assert held_compaction.overdue_since(Service.COMPACTION) == CREATED
    commit = T0 - timedelta(minutes=5)
    recent = TableFacts(delta_commits_since_compaction=(instant_of(commit),), compaction_job_active=True)
    assert decide(compaction, recent, running, CREATED, T0).overdue_since(Service.COMPACTION) == commit


def test_a_request_whose_status_patch_is_not_back_yet_is_not_made_again() -> None:
    """A look may get a body whose status does not show the request the previous look made yet (a
    busy API server or watch): what this process made counts until the status shows it."""
    from tidemark_operator.handlers import _Seen

    parsed = parse_spec(spec(clean={"interval": "1m"}, concurrencyPolicy="Allow"))
    now = T0 + timedelta(seconds=20)
    (request,) = decide(parsed, TableFacts(), {}, CREATED, now).requests
    seen = _Seen(LOCATION)
    seen.made[request.service] = LastRequest(request.instant, now, request.trigger)
    stale: dict[str, Any] = {}  # the body of the next look: the patch recording it not back yet
    later = now + timedelta(seconds=10)
    assert len(decide(parsed, TableFacts(), last_requests(stale), CREATED, later).requests) == 1  # the old bug
    assert decide(parsed, TableFacts(), seen.latest_requests(stale), CREATED, later).requests == ()
    # a status showing a newer request (another replica's, after a takeover) wins over this process's
    newer = LastRequest(instant_of(T0 + timedelta(minutes=1)), T0 + timedelta(minutes=1), "schedule")
    assert seen.latest_requests({"requests": {"clean": request_status(newer)}}) == {Service.CLEAN: newer}


def test_a_new_request_keeps_nothing_of_the_previous_requests_answer_or_job() -> None:
    """kopf sends the status as a JSON merge patch, which the API server merges at every depth: a new
    request's entry, not answered yet, kept the previous request's ``answer: skipped``, and Forbid
    took it as answered (a new request at every fire time, with no service running)."""
    import kopf
    from kmock._internal.dicts import merge_patch_dict  # the merge the tests' API server applies

    from tidemark_operator.handlers import _write
    from tidemark_operator.schedule import pending

    answered = {
        Service.CLEAN: LastRequest(instant_of(T0), T0, "schedule", answer="skipped"),
        Service.COMPACTION: LastRequest(instant_of(T0), T0, "commits", "orders-compact-1", "completed"),
    }
    later = T0 + timedelta(minutes=5)
    made = {
        Service.CLEAN: LastRequest(instant_of(later), later, "schedule"),
        Service.COMPACTION: LastRequest(instant_of(later), later, "commits"),  # no Job of its own (yet)
    }
    old = {"phase": "Ready", "requests": {str(s): request_status(r) for s, r in answered.items()}}
    patch = kopf.Patch()
    fields = {"phase": "Ready", "requests": {str(s): request_status(r) for s, r in made.items()}}
    _write(patch, old, fields, [], later, None)
    stored = merge_patch_dict(old, dict(patch["status"]))
    assert stored["requests"] == fields["requests"]
    assert last_requests(stored) == made
    # under Forbid each new request holds the next one until it is answered (or requestTimeoutSeconds)
    now, timeout = later + timedelta(seconds=10), timedelta(minutes=15)
    for service, request in last_requests(stored).items():
        assert pending(service, request, TableFacts(), timeout, now) == (
            f"the {service} request of {request.instant} is not answered yet"
        )
    patch = kopf.Patch()
    _write(patch, stored, fields, [], now, None)
    assert "status" not in patch  # a status unchanged is not written again


def _orders_job(compaction: dict[str, Any], **options: Any) -> dict[str, Any]:
    """The compaction Job of HudiTable lake/orders with ``compaction`` (due after one delta
    commit), checked against Kubernetes 1.30's schema."""
    job = compaction_job(
        parse_spec(spec(compaction={"deltaCommits": 1, **compaction})),
        resource="orders",
        namespace="lake",
        name="orders",
        request_id="r" * 32,
        instant="20240501120000000",
        image="tidemark:1",
        service_account=None,
        ttl_seconds=60,
        owner={"apiVersion": "tidemark.io/v1alpha1", "kind": "HudiTable", "name": "orders", "uid": "u"},
        **options,
    )
    kubernetes_schemas.validate(job, "1.30", strict=True)
    return job


def test_a_compaction_job_is_bounded_by_default_and_the_spec_overrides_it() -> None:
    """A HudiTable without compaction.resources gave a Job with no requests or limits and an
    unbounded /tmp, where the chart's own pods are bounded."""

    def job_of(compaction: dict[str, Any]) -> dict[str, Any]:
        return dict(_orders_job(compaction)["spec"]["template"]["spec"])

    pod = job_of({})
    (container,) = pod["containers"]
    assert container["resources"] == {
        "requests": {"cpu": "500m", "memory": "1Gi"},
        "limits": {"cpu": "2", "memory": "2Gi"},
    }
    assert pod["volumes"] == [{"name": "tmp", "emptyDir": {"sizeLimit": "2Gi"}}]
    big = {"requests": {"memory": "8Gi"}, "limits": {"memory": "12Gi", "ephemeral-storage": "20Gi"}}
    pod = job_of({"resources": big})
    (container,) = pod["containers"]
    assert container["resources"] == {
        "requests": {"cpu": "500m", "memory": "8Gi"},
        "limits": {"cpu": "2", "memory": "12Gi", "ephemeral-storage": "20Gi"},
    }
    assert pod["volumes"] == [{"name": "tmp", "emptyDir": {"sizeLimit": "20Gi"}}]


def test_a_compaction_job_that_never_starts_is_failed_by_kubernetes_at_its_deadline() -> None:
    """A pod that never starts (its credentials Secret missing) is no failed pod: without a
    deadline its Job would run for ever, holding every later compaction under Forbid."""
    from tidemark_operator.main import build_parser

    def deadline(*argv: str) -> int:
        args = build_parser().parse_args(["--bootstrap", "k:9092", "-n", "ns", *argv])
        return int(_orders_job({}, active_deadline_s=args.job_deadline)["spec"]["activeDeadlineSeconds"])

    assert deadline() == 21600  # generous: a big compaction takes hours
    assert deadline("--job-deadline", "3600") == 3600
    with pytest.raises(SystemExit):
        deadline("--job-deadline", "0")


def test_a_failed_jobs_status_says_why_kubernetes_failed_it(tmp_path: Path) -> None:
    storage = open_storage(str(tmp_path / "orders"))
    TableBuilder(storage).insert(["a", "b"])
    parsed = parse_spec({"location": str(tmp_path / "orders"), "compaction": {"deltaCommits": 1}})
    job = {"name": "orders-compact-1", "active": False, "failed": True, "reason": "DeadlineExceeded"}
    job["message"] = "Job was active longer than specified deadline"
    decision = decide(parsed, TableFacts(), {}, T0, T0)
    fields, conditions = table_status(parsed, observe(storage, parsed), EventMemory(), decision, {}, job)
    expected = (
        "compaction Job orders-compact-1 failed (DeadlineExceeded): Job was active longer than specified deadline"
    )
    assert fields["lastCompaction"]["message"] == expected
    assert {c["type"]: (c["reason"], c["message"]) for c in conditions}["Degraded"] == ("CompactionFailed", expected)


# --- command line --------------------------------------------------------------------------------


#: Kubernetes' own check of a label value (apimachinery validation.IsValidLabelValue)
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")


def test_a_compaction_jobs_table_label_is_valid_for_any_resource_name() -> None:
    def label_of(name: str) -> str:
        job = compaction_job(
            parse_spec(spec(compaction={"deltaCommits": 1})),
            resource=f"lake/{name}",
            namespace="lake",
            name=name,
            request_id="r" * 32,
            instant="20240501120000000",
            image="tidemark:1",
            service_account=None,
            ttl_seconds=60,
            owner={"apiVersion": "tidemark.io/v1alpha1", "kind": "HudiTable", "name": name, "uid": "u"},
        )
        labels = {
            job["metadata"]["labels"]["tidemark.io/table"],
            job["spec"]["template"]["metadata"]["labels"]["tidemark.io/table"],
        }
        (label,) = labels
        return str(label)

    assert label_of("orders") == "orders" == table_label("orders")
    # the 63rd character a '-' or '.': a name Kubernetes accepts for the resource
    ending_in_dash = "orders-events-by-customer-region-and-day-aggregated-for-financ-v2"
    ending_in_dot = "orders.events.by.customer.region.and.day.aggregated.for.financ.v2"
    labels = {label_of(name) for name in (ending_in_dash, ending_in_dot, ending_in_dash + "-v3", "a" * 253)}
    assert len(labels) == 4
    for label in labels:
        assert len(label) <= 63, label
        assert LABEL_VALUE.fullmatch(label), label


def test_kube_retry_bounds_what_kopf_waits_for_a_failing_request() -> None:
    from tidemark_operator.main import build_parser, settings_for

    def backoffs(*argv: str) -> tuple[float, ...]:
        args = build_parser().parse_args(["--bootstrap", "k:9092", "-n", "ns", *argv])
        return tuple(settings_for(args).networking.error_backoffs)  # type: ignore[arg-type]

    assert backoffs() == (1, 1, 2, 3, 5, 8, 13, 21)  # kopf's own, by default
    assert backoffs("--kube-retry", "6") == (1, 1, 2, 2)
    assert backoffs("--kube-retry", "0.5") == (0.5,)
    assert backoffs("--kube-retry", "100") == (1, 1, 2, 3, 5, 8, 13, 21, 21, 21, 4)


@pytest.mark.parametrize("value", ["0", "-3", "soon", "inf", "nan", "86401", "1e9"])
def test_a_bad_kube_retry_is_refused_at_start(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    from tidemark_operator.main import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["--bootstrap", "k:9092", "-n", "ns", "--kube-retry", value])
    assert f"--kube-retry: {value!r} is not a number of seconds above 0 and at most 86400" in capsys.readouterr().err


def test_every_operator_option_has_a_help_text_with_its_default(monkeypatch: pytest.MonkeyPatch) -> None:
    # as the services' --help does (the operator's Kafka, metrics and job options had none)
    from tidemark_operator.main import build_parser

    monkeypatch.delenv("TIDEMARK_METRICS_PORT", raising=False)
    parser = build_parser()
    texts = {a.option_strings[-1]: a.help or "" for a in parser._actions if a.option_strings}
    assert [o for o, text in texts.items() if not text.strip()] == []
    assert "$TIDEMARK_KAFKA_BOOTSTRAP, else 127.0.0.1:9092" in texts["--bootstrap"]
    assert "$TIDEMARK_METRICS_PORT, else 9400" in texts["--metrics-port"]
    assert "$TIDEMARK_S3_ENDPOINT" in texts["--s3-endpoint"]
    assert "$TIDEMARK_JOB_IMAGE, else tidemark:0.1.0" in texts["--job-image"]
    # a bad port from the environment is the flag's error, not a traceback
    monkeypatch.setenv("TIDEMARK_METRICS_PORT", "nine")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["-n", "ns"])


def test_the_crd_refuses_a_request_timeout_the_operator_would() -> None:
    # the API server refuses it at once (kubectl apply fails), rather than the operator at its look
    timeout = openapi_schema()["properties"]["spec"]["properties"]["requestTimeoutSeconds"]
    assert timeout["maximum"] == MAX_PERIOD.total_seconds()


def test_a_commit_stamped_in_a_writers_local_time_is_overdue_from_when_it_was_first_seen(tmp_path: Path) -> None:
    """An Apache writer's default hoodie.table.timeline.timezone=LOCAL, west of UTC: its commit
    read as UTC would be hours overdue at once (TidemarkHudiTableServiceOverdue for nothing)."""
    compaction = parse_spec(spec(compaction={"deltaCommits": 1}))
    running = {Service.COMPACTION: LastRequest("20230101000000000", CREATED, "commits", job="orders-compact-1")}
    new_york = T0 - timedelta(hours=5)  # a commit a minute old, stamped in New York's time
    local = TableFacts(delta_commits_since_compaction=(instant_of(new_york),), compaction_job_active=True)
    # read as UTC it is five hours old: overdue since the resource's creation, an hour ago
    assert decide(compaction, local, running, CREATED, T0).overdue_since(Service.COMPACTION) == CREATED
    local = replace(local, instants_in_utc=False)
    assert decide(compaction, local, running, CREATED, T0).overdue_since(Service.COMPACTION) == T0
    # a fire time is the operator's own: overdue since it, whatever the writers' zone
    clean = parse_spec(spec(clean={"interval": "1h"}))
    last = {Service.CLEAN: LastRequest(instant_of(T0 - timedelta(hours=1)), T0 - timedelta(minutes=5))}
    later = T0 + timedelta(minutes=1)
    assert (
        decide(clean, replace(local, compaction_job_active=False), last, CREATED, later).overdue_since(Service.CLEAN)
        == T0
    )
    # the table says which: UTC (as tidemark writes it), or LOCAL (Hudi's default, when unset)
    for zone, in_utc in (("UTC", True), ("LOCAL", False)):
        storage = open_storage(str(tmp_path / zone))
        TableBuilder(storage, properties={"hoodie.table.timeline.timezone": zone}).insert(["a"])
        observation = observe(storage, parse_spec({"location": str(tmp_path / zone)}))
        assert facts(observation, EventMemory()).instants_in_utc is in_utc


def test_last_compaction_names_no_job_that_has_not_made_it(tmp_path: Path) -> None:
    """While the next compaction's Job runs, lastCompaction is still the compaction before it:
    its instant and time, not beside the running Job's name (that is requests.compaction.job)."""
    storage = open_storage(str(tmp_path / "orders"))
    builder = TableBuilder(storage)
    builder.insert(["a", "b"])
    builder.update(["a"], 2)
    compacted = compact(storage)
    assert compacted is not None
    builder.update(["a"], 3)
    spec = parse_spec({"location": str(tmp_path / "orders"), "compaction": {"deltaCommits": 1}})
    observation = observe(storage, spec)
    decision = decide(spec, TableFacts(), {}, T0, T0)
    running = {"name": "orders-compact-0123456789", "active": True, "failed": False, "message": ""}
    fields, _ = table_status(spec, observation, EventMemory(), decision, {}, running)
    assert fields["lastCompaction"] == {"instant": compacted.timestamp, "time": fields["lastCompaction"]["time"]}
    # once it has finished (the timeline read again), the compaction shown is its own
    made = compact(storage)
    assert made is not None
    finished = {**running, "active": False}
    shown = table_status(spec, observe(storage, spec), EventMemory(), decision, {}, finished)[0]["lastCompaction"]
    assert (shown["instant"], shown["job"]) == (made.timestamp, running["name"])


class _BrokerSettling:
    """The listener's consumer while its broker cannot yet say where the topic was at a time (an
    ``offsets_for_times`` that timed out, as right after a restart or a takeover)."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.rewound: list[float] = []

    def rewind(self, since_s: float) -> bool:
        if self.failures:
            self.failures -= 1
            raise BrokerUnavailableError("offsets_for_times timed out")
        self.rewound.append(since_s)
        return True


def test_a_rewind_the_broker_could_not_answer_is_tried_again_at_the_next_poll() -> None:
    """A failed rewind counted as done: the topic was never read again from that request's time,
    and under Forbid the answer given while the operator was down held the next request until the
    request timed out, which the rewind is there to prevent."""
    listener = EventListener(OperatorConfig("127.0.0.1:9"), OperatorMetrics())
    listener._covered = datetime.now(UTC)  # the consumer was placed at the topic's end then
    requested = listener._covered - timedelta(minutes=5)
    listener.cover(requested)
    consumer = _BrokerSettling(failures=2)
    for _ in range(3):
        listener._rewind(consumer)  # type: ignore[arg-type]
    assert len(consumer.rewound) == 1
    assert consumer.rewound[0] < requested.timestamp()
    listener._rewind(consumer)  # type: ignore[arg-type]
    assert len(consumer.rewound) == 1  # done once: not again


def test_events_read_again_after_a_rewind_are_counted_once() -> None:
    """tidemark_operator_events_consumed counted every event a rewind read again a second time."""
    metrics = OperatorMetrics()
    listener = EventListener(OperatorConfig("127.0.0.1:9"), metrics)
    events = [
        TimelineEvent(EventType.CLEAN_COMPLETED, LOCATION, f"2024050112000000{n}", "clean", "COMPLETED", time=T0)
        for n in range(3)
    ]
    messages = []
    for offset, event in enumerate(events):
        key, value, headers = encode(event)
        messages.append(RawMessage("tidemark.timeline", 0, offset, key, value, tuple(headers)))
    for message in messages[:2]:
        listener.consume(message)
    for message in messages:  # a rewind reads the first two again
        listener.consume(message)

    def consumed() -> float:
        return (
            metrics.registry.get_sample_value(
                "tidemark_operator_events_consumed_total", {"type": str(EventType.CLEAN_COMPLETED)}
            )
            or 0.0
        )

    assert consumed() == 3
    assert listener.memory(LOCATION).latest[EventType.CLEAN_COMPLETED] == events[-1]


def test_archival_held_by_replaced_files_on_storage_is_shown(tmp_path: Path) -> None:
    """The archiver holds a replacecommit while a file of a group it replaced is on storage (a
    twin an earlier clean left); the status did not say archival was blocked."""
    import shutil

    from tests.support.table_builder import PARTITION
    from tidemark.table_services.clean import CleanConfig, clean

    location = str(tmp_path / "orders")
    storage = open_storage(location)
    t = TableBuilder(storage, copy_on_write=True)
    first = t.insert(["a", "b"], 1)
    (committed,) = (tmp_path / "orders" / PARTITION).glob(f"*_{first}.parquet")
    twin = committed.with_name(committed.name.replace("_0-1-0_", "_9-99-99_"))
    shutil.copy(committed, twin)
    replace = t.insert_overwrite(["c", "d"], 2)
    for n in range(3, 7):
        t.upsert(["c"], n)
    kept = twin.read_bytes()
    assert clean(storage, CleanConfig(commits_retained=1)) is not None
    twin.write_bytes(kept)  # as an earlier clean, which deleted only the named file, left it
    spec = parse_spec(
        {
            "location": location,
            "archive": {"interval": "1m", "keepMinCommits": 2, "keepMaxCommits": 3},
        }
    )
    observation = observe(storage, spec)
    assert observation.archival_blocked == ("replaced files on storage", replace)
    _, conditions = table_status(spec, observation, EventMemory(), decide(spec, TableFacts(), {}, T0, T0), {})
    (blocked,) = [c for c in conditions if c["type"] == "ArchivalBlocked"]
    assert blocked["status"] == "True"
    assert blocked["message"] == f"archival is held before {replace} by the replaced files on storage"
