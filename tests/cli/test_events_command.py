"""``tidemark events schema`` as a consumer runs it: the schemas it prints are the ones events are
written with, and a wrong type or version gets an error naming the right ones."""

from __future__ import annotations

import io
import json

import fastavro
import pytest

from tidemark.cli.main import main
from tidemark.events import EventType, TimelineEvent, dataschema, encode, schema_versions


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
    assert (code, out) == (1, "")
    assert "unknown event type 'tidemark.compaction.completed'" in err
    for t in EventType:
        assert str(t) in err


def test_an_unknown_version_names_the_published_ones(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "tidemark.write.started", "--version", "7")
    assert (code, out) == (1, "")
    assert err.strip() == "tidemark: error: tidemark.write.started has no schema version 7; its versions are 1"
    code, _, err = run(capsys, "--version", "1")
    assert code == 1
    assert "--version needs a TYPE" in err
