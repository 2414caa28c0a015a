"""Commands run by a user who may write to the table's storage but not delete from it (an S3
policy denying s3:DeleteObject): what they say, and what the next run with full rights finishes."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.faults import FaultyStorage
from tests.support.kafka import TansuBroker
from tests.support.model import apache_snapshot
from tests.support.services import events_of, read_topics
from tests.support.table_builder import TableBuilder
from tidemark.cli import options as options_cli
from tidemark.cli import table as table_cli
from tidemark.cli.main import main
from tidemark.errors import StorageError
from tidemark.events import EventType
from tidemark.storage import LocalStorage, S3Options, Storage, open_storage
from tidemark.table.compaction import compact
from tidemark.table_services.clean import CleanConfig, clean
from tidemark.timeline import COMPACTION, State, load_timeline
from tidemark.timeline.archived import read_archived


class _NoDeletes(FaultyStorage):
    """Writes go through; every delete is refused, as S3 refuses them to such a user."""

    def delete(self, path: str) -> None:
        raise StorageError(f"cannot delete {self.full_uri(path)}: S3 error AccessDenied (Access Denied)")


def _refusing_deletes(monkeypatch: pytest.MonkeyPatch, module: object) -> None:
    real: Callable[[str, S3Options | None], Storage] = open_storage

    def opened(location: str, options: S3Options | None = None) -> Storage:
        return _NoDeletes(real(location, options))

    monkeypatch.setattr(module, "open_storage", opened)


def _left_under_hoodie(root: Path, instant: str) -> list[str]:
    hoodie = root / ".hoodie"
    places = [hoodie / ".temp" / instant, hoodie / ".heartbeat" / instant, hoodie / ".claims" / instant]
    return [str(p.relative_to(root)) for p in places if p.exists()]


def test_a_compaction_whose_markers_cannot_be_deleted_is_committed_and_says_so(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    kafka_broker: TansuBroker,
) -> None:
    """Before, the command failed (exit 1, `cannot delete ...marker.CREATE`) after its compaction
    had committed, announced nothing, and the run after it left the marker, heartbeat and claim
    for good."""
    from tidemark.kafka_adapter import ensure_topics

    root = tmp_path / "t"
    t = TableBuilder(LocalStorage(root))
    t.insert(["a", "b"], 1)
    t.update(["a"], 2)
    topic = f"compactions-{uuid.uuid4().hex[:8]}"
    ensure_topics(kafka_broker.bootstrap, [topic])
    argv = ["compact", str(root), "--engine", "local", "--conf", f"tidemark.events.bootstrap={kafka_broker.bootstrap}"]
    argv += ["--conf", f"tidemark.events.topic={topic}"]

    _refusing_deletes(monkeypatch, table_cli)
    assert main(argv) == 0
    (done,) = load_timeline(t.storage).completed().of_actions(COMPACTION)
    assert capsys.readouterr().out == f"compaction committed at {done.timestamp}\n"
    assert (
        f"compaction {done.timestamp} is committed, but its markers were not removed: cannot delete "
        f"{t.storage.full_uri('.hoodie/.temp/')}" in caplog.text
    )
    events = events_of(read_topics(kafka_broker.bootstrap, [topic], until=bool, seconds=20))
    assert [(e.type, e.instant) for e in events] == [(EventType.INSTANT_COMPLETED, done.timestamp)]
    assert _left_under_hoodie(root, done.timestamp) == [
        f".hoodie/{folder}/{done.timestamp}" for folder in (".temp", ".heartbeat", ".claims")
    ]

    # the next compaction, deletes still refused: what the first one left cannot be removed, which
    # stops no work (it refused every later compaction)
    t.update(["b"], 3)
    assert main(["compact", str(root), "--engine", "local"]) == 0
    (_, second) = load_timeline(t.storage).completed().of_actions(COMPACTION)
    assert capsys.readouterr().out == f"compaction committed at {second.timestamp}\n"
    assert f"compaction {done.timestamp} is committed, but its markers were not removed" in caplog.text

    monkeypatch.undo()  # full rights again: the next compact removes what the commit left
    assert main(["compact", str(root), "--engine", "local"]) == 0
    assert capsys.readouterr().out == "nothing to compact\n"
    assert _left_under_hoodie(root, done.timestamp) == _left_under_hoodie(root, second.timestamp) == []
    assert [(i.timestamp, i.state.name) for i in load_timeline(t.storage).of_actions(COMPACTION)] == [
        (done.timestamp, "COMPLETED"),
        (second.timestamp, "COMPLETED"),
    ]
    assert t.snapshot() == {"a": 2, "b": 3}
    assert {r["id"]: r["v"] for r in apache_snapshot(str(root)).to_pylist()} == {"a": 2, "b": 3}


def test_an_archival_stopped_by_a_refused_delete_says_so_and_the_next_one_says_it_finished_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before, the error was the bare `cannot delete ...deltacommit.requested`, and the run that
    finished the archival printed `archived 0 instants`."""
    root = tmp_path / "t"
    t = TableBuilder(LocalStorage(root))
    keys = [f"k{i}" for i in range(3)]
    t.insert(keys, 1)
    for v in range(2, 8):
        t.update(keys, v)
    compact(t.storage)
    t.update(["k1"], 50)
    settings = {"hoodie.cleaner.commits.retained": "1", "hoodie.keep.min.commits": "2", "hoodie.keep.max.commits": "3"}
    assert clean(t.storage, CleanConfig.from_conf(settings)) is not None
    active = load_timeline(t.storage).instants
    conf = [word for key, value in settings.items() for word in ("--conf", f"{key}={value}")]

    _refusing_deletes(monkeypatch, options_cli)  # where the service commands open the table
    for _ in range(2):  # the second run stops where the first did, and says the same
        assert main(["archive", str(root), *conf]) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"tidemark: error: cannot delete {t.storage.full_uri('.hoodie/')}"), err
        assert err.rstrip().endswith(
            "stopped half-way: its instants are in the archive log and still on the active timeline; once the "
            f"cause is removed, `tidemark archive {t.storage.uri}` run again finishes it"
        ), err
    assert load_timeline(t.storage).instants == active
    archived = [i for i in read_archived(t.storage) if i.state is State.COMPLETED]
    assert len(archived) == 7

    monkeypatch.undo()
    assert main(["archive", str(root), *conf]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "finished the archival a stopped run left: removed 7 archived instants from the active timeline"
    assert sorted(line.split(".")[0].strip() for line in out[1:8]) == sorted(i.timestamp for i in archived)
    assert out[8].startswith("archived 0 instants; stopped by: ")
    assert len(load_timeline(t.storage).instants) == len(active) - 7
    rows = {"k0": 7, "k1": 50, "k2": 7}
    assert t.snapshot() == rows
    assert {r["id"]: r["v"] for r in apache_snapshot(str(root)).to_pylist()} == rows
