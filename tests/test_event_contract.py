"""The published event contract: schema files, ``ce_dataschema``, schema evolution, and the
README's consumer example run against a real broker (tansu)."""

from __future__ import annotations

import io
import itertools
import json
import re
import subprocess
import sys
import uuid
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

import fastavro
import pytest
from fastavro.schema import to_parsing_canonical_form
from fastavro.utils import generate_many

from tests.support.kafka import TansuBroker, send_foreign
from tidemark.events import (
    SCHEMA_FOLDER,
    SKIPPED_TYPES,
    EventType,
    TimelineEvent,
    current_version,
    dataschema,
    decode,
    encode,
    schema,
    schema_versions,
)

REPO = Path(__file__).resolve().parent.parent
#: A frozen copy of every published schema version, added when the version is published and
#: never edited afterwards: what consumers of that version decode with.
FROZEN = Path(__file__).parent / "data" / "event_schemas"
README = REPO / "README.md"

#: The schema every event was written with before the schemas became versioned files (it was a
#: Python literal in ``tidemark.events``); consumers written then decode with it.
LEGACY_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "TimelineEvent",
    "namespace": "tidemark.events",
    "fields": [
        {"name": "table", "type": "string"},
        {"name": "instant", "type": "string"},
        {"name": "action", "type": "string"},
        {"name": "state", "type": "string"},
        {"name": "earliestCommitToRetain", "type": ["null", "string"], "default": None},
        {"name": "earliestCommitToNotArchive", "type": ["null", "string"], "default": None},
        {"name": "extra", "type": {"type": "map", "values": "string"}, "default": {}},
    ],
}

T0 = datetime(2024, 5, 1, 12, 30, 15, 123456, tzinfo=UTC)
TABLE = "s3://lake/warehouse/orders"


def _event(type_: EventType, **kw: Any) -> TimelineEvent:
    args: dict[str, Any] = {
        "type": type_,
        "table": TABLE,
        "instant": "20240501123015123",
        "action": "deltacommit",
        "state": "COMPLETED",
        "time": T0,
        **kw,
    }
    return TimelineEvent(**args)


def _package_files() -> dict[str, Any]:
    folder = resources.files("tidemark").joinpath(SCHEMA_FOLDER)
    return {e.name: json.loads(e.read_text("utf-8")) for e in folder.iterdir() if e.name.endswith(".avsc")}


def _frozen_files() -> dict[str, Any]:
    return {p.name: json.loads(p.read_text("utf-8")) for p in FROZEN.glob("*.avsc")}


# --- the schemas ---------------------------------------------------------------------------------


@pytest.mark.parametrize("type_", list(EventType))
def test_every_event_names_its_schema_and_is_avro_of_it(type_: EventType) -> None:
    event = _event(type_, extra={"k": "v"})
    _, value, headers = encode(event)
    urn = f"urn:tidemark:schema:{type_}:{current_version(type_)}"
    assert dict(headers)["ce_dataschema"] == urn.encode() == dataschema(type_).encode()
    # a consumer needs nothing but the .avsc the URN names
    published = _package_files()[f"{type_}.v{current_version(type_)}.avsc"]
    datum = fastavro.schemaless_reader(io.BytesIO(value), fastavro.parse_schema(published), None)
    assert datum["table"] == TABLE
    assert datum["extra"] == {"k": "v"}
    assert schema(type_) == published


def test_published_schema_versions_are_never_edited_or_removed() -> None:
    package, frozen = _package_files(), _frozen_files()
    assert frozen, f"no frozen schemas in {FROZEN}"
    unfrozen = sorted(set(package) - set(frozen))
    assert not unfrozen, f"publish {unfrozen} by adding a frozen copy to {FROZEN.relative_to(REPO)}"
    for name, published in frozen.items():
        assert name in package, f"{name} was published; it must stay in the package"
        assert package[name] == published, (
            f"{name} was edited after it was published: add the next version of the type's schema instead"
        )


def test_the_skipped_schemas_say_the_state_they_carry() -> None:
    for type_ in SKIPPED_TYPES:
        (state,) = [f for f in schema(type_)["fields"] if f["name"] == "state"]
        assert state["doc"].startswith("SKIPPED"), (type_, state["doc"])


def test_version_1_of_every_type_is_the_format_published_before_versioning() -> None:
    legacy = fastavro.parse_schema(LEGACY_SCHEMA)
    for type_ in EventType:
        v1 = fastavro.parse_schema(schema(type_, 1))
        assert to_parsing_canonical_form(v1) == to_parsing_canonical_form(legacy), type_
        # and today's bytes are read unchanged by a consumer of that format
        event = _event(type_, earliest_commit_to_retain="20240501000000000", extra={"filesDeleted": "3"})
        _, value, _ = encode(event)
        datum = fastavro.schemaless_reader(io.BytesIO(value), legacy, None)
        assert (datum["instant"], datum["earliestCommitToRetain"], datum["extra"]) == (
            event.instant,
            "20240501000000000",
            {"filesDeleted": "3"},
        )


# --- evolution: FULL compatibility between consecutive versions ----------------------------------


def _samples(writer: Any) -> list[Any]:
    return [*generate_many(writer, 40)]


def full_compatibility_errors(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Why ``new`` is not FULL-compatible with ``old`` (empty when it is): data written with
    either must be readable with the other as the reader schema (Avro schema resolution)."""
    errors = []
    old_p, new_p = fastavro.parse_schema(old), fastavro.parse_schema(new)
    for writer, reader, direction in (
        (new_p, old_p, "forward (a consumer of the old version reading new data)"),
        (old_p, new_p, "backward (a consumer of the new version reading old data)"),
    ):
        for datum in _samples(writer):
            buf = io.BytesIO()
            fastavro.schemaless_writer(buf, writer, datum)
            try:
                fastavro.schemaless_reader(io.BytesIO(buf.getvalue()), writer, reader)
            except Exception as exc:
                errors.append(f"{direction}: {type(exc).__name__}: {exc}")
                break
    return errors


@pytest.mark.parametrize("type_", list(EventType))
def test_each_schema_version_is_full_compatible_with_the_one_before(type_: EventType) -> None:
    chain = [LEGACY_SCHEMA, *(schema(type_, v) for v in schema_versions(type_))]
    for version, (old, new) in enumerate(itertools.pairwise(chain), start=1):
        assert full_compatibility_errors(old, new) == [], f"{type_} v{version} against the version before"


def test_the_compatibility_check_finds_incompatible_changes() -> None:
    v1 = schema(EventType.CLEAN_COMPLETED, 1)

    def changed(fields: list[dict[str, Any]]) -> dict[str, Any]:
        return {**v1, "fields": fields}

    with_default = changed([*v1["fields"], {"name": "bytesReclaimed", "type": ["null", "long"], "default": None}])
    assert full_compatibility_errors(v1, with_default) == []  # the allowed way to add a field

    without_default = changed([*v1["fields"], {"name": "bytesReclaimed", "type": "long"}])
    assert [e.split(":")[0] for e in full_compatibility_errors(v1, without_default)] == [
        "backward (a consumer of the new version reading old data)"
    ]
    no_action = changed([f for f in v1["fields"] if f["name"] != "action"])
    assert [e.split(":")[0] for e in full_compatibility_errors(v1, no_action)] == [
        "forward (a consumer of the old version reading new data)"
    ]
    retyped = changed([{**f, "type": "int"} if f["name"] == "state" else f for f in v1["fields"]])
    assert len(full_compatibility_errors(v1, retyped)) == 2


# --- the README's consumer example ---------------------------------------------------------------


def readme_consumer_example(readme: Path = README) -> str:
    """The code of the README's ```python consumer-example block."""
    match = re.search(r"^```python consumer-example\n(.*?)^```$", readme.read_text("utf-8"), re.S | re.M)
    assert match is not None, f"{readme} has no ```python consumer-example block (section: Consuming timeline events)"
    return match.group(1)


@pytest.mark.kafka
def test_the_readme_consumer_example_decodes_real_events(kafka_broker: TansuBroker, tmp_path: Path) -> None:
    from tidemark.kafka_adapter import EventProducer, ensure_topics

    example = tmp_path / "consume_events.py"
    example.write_text(readme_consumer_example())
    schemas = tmp_path / "tidemark-schemas.json"
    with schemas.open("w") as out:  # the command the README tells consumers to run
        subprocess.run(
            [sys.executable, "-m", "tidemark.cli.main", "events", "schema"], stdout=out, check=True, timeout=60
        )

    topic = f"tidemark-contract-{uuid.uuid4().hex[:12]}"
    ensure_topics(kafka_broker.bootstrap, [topic], partitions=1)
    conflicted = _event(
        EventType.WRITE_CONFLICTED,
        state="CONFLICTED",
        source="/tidemark/writer-coordinator",
        extra={"other": "20240501123015000", "fileGroups": "fg-1,fg-2", "stage": "commit", "message": "lost"},
    )
    older = _event(EventType.CLEAN_COMPLETED, instant="20240501130000000", action="clean")
    # a foreign producer's messages come first: a header with a null value (Java's
    # RecordHeader(name, null)), and one that looks like an event but lacks ce_id
    send_foreign(kafka_broker.bootstrap, topic, b"k", b"{}", [("trace", None), ("ce_specversion", None)])
    damaged = [(n, v) for n, v in encode(older)[2] if n != "ce_id"]
    send_foreign(kafka_broker.bootstrap, topic, b"k", encode(older)[1], damaged)
    with EventProducer(kafka_broker.bootstrap) as producer:
        producer.publish(topic, conflicted)
        producer.publish(topic, conflicted)  # delivered twice: the example handles it once
        key, value, headers = encode(older)  # as a producer before ce_dataschema existed sent it
        producer.publish_raw(topic, key, value, [(n, v) for n, v in headers if n != "ce_dataschema"])

    env = {
        "KAFKA_BOOTSTRAP": kafka_broker.bootstrap,
        "TIDEMARK_TOPIC": topic,
        "TIDEMARK_SCHEMAS": str(schemas),
        "EXIT_WHEN_IDLE_MS": "10000",
        "PATH": "/usr/bin:/bin",
    }
    run = subprocess.run(
        [sys.executable, str(example)], capture_output=True, text=True, env=env, timeout=120, check=False
    )
    assert run.returncode == 0, run.stderr
    printed = [json.loads(line) for line in run.stdout.splitlines()]
    assert [(p["type"], p["id"], p["instant"]) for p in printed] == [
        (str(conflicted.type), conflicted.id, conflicted.instant),
        (str(older.type), older.id, older.instant),
    ]
    assert printed[0]["extra"] == conflicted.extra
    assert printed[0]["time"] == "2024-05-01T12:30:15.123456Z"
    assert printed[1]["table"] == TABLE
    # and tidemark's own decoder agrees with the older producer's event
    assert decode(key, value, [(n, v) for n, v in headers if n != "ce_dataschema"]) == older
