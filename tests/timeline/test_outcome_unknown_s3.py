"""An S3 endpoint gone while an instant is completed, so that whether it landed cannot be asked
(:class:`OutcomeUnknownError`): the error names what finishes that action's instant left pending,
and doing that finishes it."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.support.faults import FaultyStorage
from tests.support.s3 import DROP, FaultProxy, Forward, create_bucket, is_conditional_put, s3_options
from tests.support.table_builder import RECOVERY, TableBuilder
from tidemark.errors import OutcomeUnknownError
from tidemark.storage import open_storage
from tidemark.table import write_client
from tidemark.table.compaction import compact
from tidemark.table_services.clean import CleanConfig, clean
from tidemark.table_services.restore import restore
from tidemark.table_services.savepoint import create_savepoint
from tidemark.timeline import State, create_requested, load_timeline, transition_to_completed, transition_to_inflight

pytestmark = pytest.mark.s3

KEEP_ONE = CleanConfig(policy="KEEP_LATEST_FILE_VERSIONS", file_versions_retained=1)

#: an action: (the suffix of its completed file, what it runs on the table (its storage S3 going down), what the
#: error must say finishes it (with {uri} and {ts}, the savepoint or the rolled-back write), and
#: what does that)
Case = tuple[str, Callable[[TableBuilder, str], object], str, Callable[[TableBuilder, str], object]]
CASES: dict[str, Case] = {
    "write": (
        ".deltacommit",
        lambda t, ts: t.update(["a"], 3),
        "the next write rolls it back once its heartbeat has expired",
        lambda t, ts: write_client.rollback_pending_writes(t.storage, RECOVERY),
    ),
    "restore": (
        ".restore",
        lambda t, ts: restore(t.storage, ts),
        "`tidemark restore {uri} {ts}` run again finishes it",
        lambda t, ts: restore(t.storage, ts),
    ),
    "rollback": (
        ".rollback",
        lambda t, ts: write_client.rollback(t.storage, ts),
        "`tidemark rollback {uri} {ts}` run again finishes it",
        lambda t, ts: write_client.rollback(t.storage, ts),
    ),
    "compaction": (
        ".commit",
        lambda t, ts: compact(t.storage),
        "`tidemark compact {uri}` run again finishes it once its heartbeat has expired",
        lambda t, ts: compact(t.storage, RECOVERY),
    ),
    "clean": (
        ".clean",
        lambda t, ts: clean(t.storage, KEEP_ONE),
        "`tidemark clean {uri}` run again finishes it",
        lambda t, ts: clean(t.storage, KEEP_ONE),
    ),
    "savepoint": (
        ".savepoint",
        lambda t, ts: create_savepoint(t.storage, ts),
        "`tidemark savepoint create {uri} {ts}` run again finishes it",
        lambda t, ts: create_savepoint(t.storage, ts),
    ),
}


@pytest.mark.parametrize("action", list(CASES))
def test_an_unknown_outcome_names_what_finishes_the_action(moto_server: str, action: str) -> None:
    """Before, every action was told "otherwise the next write rolls it back": a write is refused
    after a restore left pending, and a compaction, clean, rollback or savepoint is finished by its
    own command run again, never by a write (and a write's only once its heartbeat has expired)."""
    suffix, run, advice, finish = CASES[action]
    location = f"s3://{create_bucket(moto_server)}/t"
    t = TableBuilder(open_storage(location, s3_options(moto_server)))
    first = t.insert(["a", "b"], 1)
    t.update(["a", "b"], 2)
    compact(t.storage)
    latest = t.update(["a"], 2)
    ts = {"restore": first, "rollback": latest, "savepoint": latest}.get(action, "")
    if action == "restore":
        create_savepoint(t.storage, first)
    healthy = t.storage
    t.storage = down = FaultyStorage(open_storage(location, s3_options(moto_server)))
    down.arm_at(suffix)  # the completed file's request fails, and S3 stays down: nobody can ask

    with pytest.raises(OutcomeUnknownError) as excinfo:
        run(t, ts)
    t.storage = healthy
    message = str(excinfo.value)
    assert down.fired is not None
    assert down.fired.path.endswith(suffix)
    assert f"Run `tidemark timeline {location}` once storage answers" in message
    assert advice.format(uri=location, ts=ts) in message
    if action != "write":
        assert "write" not in message.split("once storage answers")[1]

    # it did not land; what the error names finishes it
    assert load_timeline(t.storage).pending().instants
    finish(t, ts)
    assert not load_timeline(t.storage).pending().instants, [str(i) for i in load_timeline(t.storage).pending()]


def test_a_commit_that_landed_with_its_answer_lost_is_not_reported_as_another_writers(moto_server: str) -> None:
    """The PUT of ``<ts>.commit`` lands but its answer is lost; botocore's retry gets 412, and the
    GET asking whose object that is fails too. It was reported as "another writer got there first"
    (a user writing again would duplicate the rows, the commit being done): storage could not
    tell, and the error now says so and how to find out."""
    location = f"s3://{create_bucket(moto_server)}/t"
    direct = open_storage(location, s3_options(moto_server))
    ts = "20250101000000000"
    inflight = transition_to_inflight(direct, create_requested(direct, ts, "commit"))
    puts: list[str] = []

    def hook(method: str, path: str, headers: dict[str, str], body: bytes, forward: Forward) -> str | None:
        if not path.split("?")[0].endswith(f"/{ts}.commit"):
            return None
        if is_conditional_put(method, headers):
            puts.append(path)
            if len(puts) == 1:
                forward(method, path, body, headers)  # it lands
                return DROP  # and its answer is lost
        if method == "GET":
            return DROP  # the same flaky link: asking fails as well
        return None

    with FaultProxy(moto_server, hook) as proxy:
        flaky = open_storage(location, s3_options(proxy.endpoint))
        with pytest.raises(OutcomeUnknownError) as excinfo:
            transition_to_completed(flaky, inflight, b'{"ours": true}', finished_by=None)
    assert "another writer" not in str(excinfo.value)
    assert f"Run `tidemark timeline {location}` once storage answers" in str(excinfo.value)
    assert len(puts) == 2  # the lost try and botocore's retry, which met it
    assert load_timeline(direct).last() == inflight.with_state(State.COMPLETED)  # it did land
