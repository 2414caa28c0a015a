"""A command's announcement settings (``tidemark.events.bootstrap`` and ``tidemark.kafka.*``),
checked before the command changes anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidemark.announcements import announcement_security


@pytest.mark.parametrize(
    ("key", "meant"),
    [
        ("tidemark.kafak.ssl.ca.location", "tidemark.kafka.ssl.ca.location"),
        ("tidemark.ssl.ca.location", "tidemark.kafka.ssl.ca.location"),
    ],
)
def test_a_misspelt_kafka_key_is_refused_without_a_bootstrap(key: str, meant: str) -> None:
    """The family misspelt or left out passed without a word until a bootstrap was added."""
    with pytest.raises(ValueError, match=rf"unknown Kafka setting\(s\) {key} \(did you mean {meant}\?\)"):
        announcement_security({key: "/x"})


def test_other_tidemark_keys_announce_nothing() -> None:
    assert announcement_security({"tidemark.events.topic": "t", "hoodie.table.name": "t"}) is None


def test_compact_refuses_a_misspelt_kafka_family_before_it_compacts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.support.table_builder import TableBuilder
    from tidemark.cli.main import main
    from tidemark.storage import LocalStorage
    from tidemark.timeline import COMPACTION, load_timeline

    t = TableBuilder(LocalStorage(tmp_path / "t"))
    t.insert(["a"], 1)
    t.update(["a"], 2)
    argv = ["compact", str(tmp_path / "t"), "--engine", "local", "--conf", "tidemark.kafak.ssl.ca.location=/x"]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert "unknown Kafka setting(s) tidemark.kafak.ssl.ca.location" in err.splitlines()[-1], err
    assert not list(load_timeline(t.storage).completed().of_actions(COMPACTION))
