"""``tidemark events schema`` as a consumer runs it: the schemas it prints are the ones events are
written with, and a wrong type or version gets an error naming the right ones."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import fastavro
import pytest

from tidemark.cli.main import main
from tidemark.events import EventType, TimelineEvent, dataschema, encode, schema_versions
from tidemark.timeline import COMPACTION, load_timeline


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["events", "schema", *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("type_", list(EventType))
def test_the_schema_of_a_type_is_the_one_its_events_are_written_with(
    capsys: pytest.CaptureFixture[str], type_: EventType
) -> None:
    code, out, err = run(capsys, str(type_))
    assert (code, err) == (0, "")
    printed = fastavro.parse_schema(json.loads(out))
    event = TimelineEvent(type_, "s3://lake/t", "20240501000000000", "commit", "COMPLETED", extra={"k": "v"})
    _, value, headers = encode(event)
    assert dict(headers)["ce_dataschema"] == dataschema(type_).encode()
    datum = fastavro.schemaless_reader(io.BytesIO(value), printed, None)
    assert (datum["table"], datum["instant"], datum["extra"]) == ("s3://lake/t", "20240501000000000", {"k": "v"})


def test_without_a_type_every_version_of_every_type_is_printed_by_its_dataschema(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(capsys)
    assert code == 0
    printed = json.loads(out)
    assert set(printed) == {dataschema(t, v) for t in EventType for v in schema_versions(t)}
    assert "urn:tidemark:schema:tidemark.write.conflicted:1" in printed
    for urn, avsc in printed.items():
        fastavro.parse_schema(avsc)  # raises for anything that is not a valid Avro schema
        assert avsc["name"] == "TimelineEvent", urn


def test_a_published_version_can_be_asked_for(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "tidemark.clean.completed", "--version", "1")
    assert code == 0
    assert json.loads(out) == json.loads(run(capsys, "tidemark.clean.completed")[1])


def test_an_unknown_type_lists_the_types(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "tidemark.compaction.completed")
    assert (code, out) == (2, "")  # a usage error, as argparse's own
    assert err.startswith("usage: tidemark events schema ")
    assert "tidemark events schema: error: unknown event type 'tidemark.compaction.completed'" in err
    for t in EventType:
        assert str(t) in err


def test_an_unknown_version_names_the_published_ones(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "tidemark.write.started", "--version", "7")
    assert (code, out) == (2, "")
    assert err.strip().splitlines()[-1] == (
        "tidemark events schema: error: tidemark.write.started has no schema version 7; its versions are 1"
    )
    code, _, err = run(capsys, "--version", "1")
    assert code == 2
    assert "tidemark events schema: error: --version needs a TYPE" in err


@pytest.mark.kafka
def test_a_compaction_announces_its_commit(tmp_path: Path, kafka_broker: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """README's contract: instant.completed for "a write or compaction completed"; the operator's
    compaction Jobs run `tidemark compact`, whose commit no observer saw before."""
    import uuid

    from tests.support.services import events_of, read_topics
    from tests.support.table_builder import TableBuilder
    from tidemark.kafka_adapter import ensure_topics
    from tidemark.storage import LocalStorage

    t = TableBuilder(LocalStorage(tmp_path / "t"))
    t.insert(["a"], 1)
    t.update(["a"], 2)
    topic = f"compactions-{uuid.uuid4().hex[:8]}"
    ensure_topics(kafka_broker.bootstrap, [topic])
    settings = [
        "--conf",
        f"tidemark.events.bootstrap={kafka_broker.bootstrap}",
        "--conf",
        f"tidemark.events.topic={topic}",
    ]
    monkeypatch.chdir(tmp_path)  # a relative path: the event names the table absolutely
    assert main(["compact", "t", "--engine", "local", *settings]) == 0
    (done,) = load_timeline(t.storage).completed().of_actions(COMPACTION)
    events = events_of(read_topics(kafka_broker.bootstrap, [topic], until=bool, seconds=20))
    assert [(e.type, e.table, e.instant) for e in events] == [
        (EventType.INSTANT_COMPLETED, str(tmp_path / "t"), done.timestamp)
    ]


def test_a_bad_events_bootstrap_fails_the_compaction_before_it_compacts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """kafka-python ended the announcement in a ValueError after the commit (a port that is no
    number), or announced to port 34463 for 99999."""
    from tests.support.table_builder import TableBuilder
    from tidemark.storage import LocalStorage

    t = TableBuilder(LocalStorage(tmp_path / "t"))
    t.insert(["a"], 1)
    t.update(["a"], 2)
    for bootstrap, message in [
        ("nohost:xx", "'nohost:xx': 'xx' is not a port number"),
        ("127.0.0.1:99999", "'127.0.0.1:99999': '99999' is not a port number"),
    ]:
        argv = ["compact", str(tmp_path / "t"), "--engine", "local", "--conf", f"tidemark.events.bootstrap={bootstrap}"]
        assert main(argv) != 0
        err = capsys.readouterr().err.strip()
        assert f"tidemark.events.bootstrap={bootstrap}: {message}" in err.splitlines()[-1], err
        assert "Traceback" not in err
    assert not list(load_timeline(t.storage).completed().of_actions(COMPACTION))
