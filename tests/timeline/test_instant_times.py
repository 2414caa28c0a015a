"""New instant times: claimed by one process each, later than every instant on the timeline, and
refused (not waited for) when the timeline's latest is hours ahead of this machine's clock."""

from __future__ import annotations

import datetime
import re
from pathlib import Path

import pytest

from tests.support.s3 import (
    DROP,
    Answer,
    FaultProxy,
    Forward,
    create_bucket,
    is_conditional_put,
    s3_error,
    s3_options,
)
from tidemark.errors import InstantTimeAheadError
from tidemark.storage import LocalStorage, open_storage
from tidemark.timeline import (
    CLEAN,
    DELTA_COMMIT,
    active,
    claim_instant_time,
    create_requested,
    load_timeline,
    new_instant_time,
    next_instant_time,
    request_new_instant,
)
from tidemark.timeline.active import claim_path, live_claims


def _at(delta: datetime.timedelta) -> str:
    return new_instant_time(datetime.datetime.now(datetime.UTC) + delta)


def test_a_time_claimed_by_another_process_or_on_the_timeline_is_not_taken(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path)
    create_requested(storage, "20200101000000000", DELTA_COMMIT)
    timeline = load_timeline(storage)
    first = claim_instant_time(storage, timeline)
    second = claim_instant_time(storage, timeline, after="20200101000000000")
    assert second.timestamp > first.timestamp  # the first one holds its claim
    first.release()
    second.release()
    # an instant of another engine that claims nothing, at the time this process reads
    taken = request_new_instant(storage, timeline, CLEAN)
    again = claim_instant_time(storage, timeline, after=str(int(taken.timestamp) - 1))
    assert again.timestamp > taken.timestamp
    again.release()
    assert not storage.exists(claim_path(taken.timestamp))


def test_a_latest_instant_a_moment_ahead_is_waited_for(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path)
    ahead = create_requested(storage, _at(datetime.timedelta(milliseconds=50)), DELTA_COMMIT)
    assert next_instant_time(load_timeline(storage), table=storage.uri) > ahead.timestamp


def test_a_latest_instant_stamped_in_local_time_east_of_utc_is_refused_at_once(tmp_path: Path) -> None:
    # an Apache writer in UTC+8 stamping local time (hoodie.table.timeline.timezone=LOCAL)
    storage = LocalStorage(tmp_path)
    ahead = create_requested(storage, _at(datetime.timedelta(hours=8)), DELTA_COMMIT)
    with pytest.raises(InstantTimeAheadError) as caught:
        request_new_instant(storage, load_timeline(storage), DELTA_COMMIT)
    message = str(caught.value)
    # 8 h less the moment between stamping it and checking: within the same millisecond it is 8:00:00
    head = f"{storage.uri}: its latest instant {ahead.timestamp} is "
    assert re.match(re.escape(head) + r"(7:59:5\d|8:00:00) \(h:mm:ss\) ahead", message), message
    assert "hoodie.table.timeline.timezone=UTC" in message
    assert [i.timestamp for i in load_timeline(storage)] == [ahead.timestamp]


def test_a_time_passed_by_an_instant_opened_meanwhile_is_not_taken(tmp_path: Path) -> None:
    """A process that read its timeline and clock, then paused while another opened (and
    completed) a later instant, opened its instant earlier than that one: a savepoint of the later
    one, made in between, did not keep the files that reads as of it then included."""
    storage = LocalStorage(tmp_path)
    timeline = load_timeline(storage)  # read before the later instant was opened
    later = create_requested(storage, _at(datetime.timedelta(milliseconds=50)), DELTA_COMMIT)
    claim = claim_instant_time(storage, timeline)
    assert claim.timestamp > later.timestamp
    claim.release()


@pytest.mark.s3
def test_a_claim_another_process_took_while_ours_was_retried_is_not_taken_for_ours(
    moto_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two processes read one time from their clocks. Our conditional PUT of its claim is answered
    503 (nothing stored), the other process claims that time meanwhile, and botocore's retry gets
    412. Claims were empty, so the other's claim held our bytes and was taken for our own first
    try: both processes opened instants at one time."""
    now = new_instant_time()
    clock = iter([now, now])  # both read the same millisecond, then the clock moves on
    monkeypatch.setattr(active, "new_instant_time", lambda *at: next(clock, None) or new_instant_time(*at))
    bucket = create_bucket(moto_server)
    other = open_storage(f"s3://{bucket}/t", s3_options(moto_server))
    taken: list[str] = []

    def hook(method: str, path: str, headers: dict[str, str], body: bytes, forward: Forward) -> Answer | None:
        if is_conditional_put(method, headers) and "/.claims/" in path and not taken:
            taken.append(claim_instant_time(other, load_timeline(other)).timestamp)
            return s3_error(503, "SlowDown", "Please reduce your request rate.")
        return None

    with FaultProxy(moto_server, hook) as proxy:
        ours = open_storage(f"s3://{bucket}/t", s3_options(proxy.endpoint))
        claim = claim_instant_time(ours, load_timeline(ours))
    assert taken == [now]
    assert claim.timestamp > now  # ours moved on to a later time
    assert other.read(claim_path(taken[0])) != other.read(claim_path(claim.timestamp))


@pytest.mark.s3
def test_a_claim_whose_outcome_is_unknown_is_given_up_for_another_time(moto_server: str) -> None:
    """A claim's create lands, its answer is lost, the retry meets it (412) and the read asking
    whose it is fails too: the whole write or compaction failed ('cannot tell whether creating
    .hoodie/.claims/... landed'), where a later time is always safe to take."""
    from tidemark.table.concurrency import ConcurrencyConfig
    from tidemark.table.heartbeat import Heartbeat

    bucket = create_bucket(moto_server)
    puts: list[str] = []

    def hook(method: str, path: str, headers: dict[str, str], body: bytes, forward: Forward) -> Answer | str | None:
        if is_conditional_put(method, headers) and not puts:  # the first claim only
            puts.append(path)
            forward(method, path, body, headers)
            return DROP  # landed, its answer lost
        if method == "GET" and path in puts:
            return DROP  # and the read asking whose it is fails
        return None

    with FaultProxy(moto_server, hook) as proxy:
        storage = open_storage(f"s3://{bucket}/t", s3_options(proxy.endpoint))
        claim = claim_instant_time(storage, load_timeline(storage))
        first = puts[0].rsplit("/", 1)[-1]
        assert claim.timestamp > first  # the unknown one given up
        puts.clear()  # and a heartbeat's first beat alike
        assert not Heartbeat(storage, "20990101000000000", ConcurrencyConfig()).claim()


def test_claims_of_every_format_are_listed_and_released(tmp_path: Path) -> None:
    """Claims made before they held a token (empty files) count and go as the new ones do."""
    storage = LocalStorage(tmp_path)
    old = _at(datetime.timedelta(seconds=-1))
    storage.create_if_absent(claim_path(old), b"")
    claim = claim_instant_time(storage, load_timeline(storage))
    assert claim.timestamp > old
    assert storage.read(claim_path(claim.timestamp))  # a token of its own
    assert live_claims(storage) == (old, claim.timestamp)
    claim.release()
    assert live_claims(storage) == (old,)
