"""New instant times: claimed by one process each, later than every instant on the timeline, and
refused (not waited for) when the timeline's latest is hours ahead of this machine's clock."""

from __future__ import annotations

import datetime
import re
from pathlib import Path

import pytest

from tidemark.errors import InstantTimeAheadError
from tidemark.storage import LocalStorage
from tidemark.timeline import (
    CLEAN,
    DELTA_COMMIT,
    claim_instant_time,
    create_requested,
    load_timeline,
    new_instant_time,
    next_instant_time,
    request_new_instant,
)
from tidemark.timeline.active import claim_path


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
