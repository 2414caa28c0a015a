"""Payload classes and merge modes: for each one a table whose log blocks hold newer and older
updates, partial rows, deletes the payload recognises, delete records and a new key; its merged
snapshot is derived here from Hudi's documented rule for that payload (a small model, written
from Hudi's javadoc and ``preCombine`` / ``combineAndGetUpdateValue`` contracts, not from
tidemark's code), and checked in tidemark's reader, after a compaction, and through Apache's reader
(hudi-rs) for the payloads hudi-rs implements.

hudi-rs (the ``hudi`` package) implements Hudi 1.x's merge modes: it reads
``OverwriteWithLatestAvroPayload`` and ``COMMIT_TIME_ORDERING`` tables by commit time,
``DefaultHoodieRecordPayload``, ``EventTimeAvroPayload`` and ``EVENT_TIME_ORDERING`` ones by event
time, and refuses the other five payloads ("a merger of its own"). Those rules are compared with
it, but for ``EventTimeAvroPayload``, whose deletes it orders as ``EVENT_TIME_ORDERING``'s.
Tables are written as Hudi's writer writes them (records the payload takes as deletes stored as
delete records) and "raw", with such records left in their data blocks (as a writer other than
Hudi's Spark writer may), to check that the reader applies the payload's own delete rule.

The tables are built through the library write client (no Spark)."""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from tests.support.model import apache_snapshot
from tidemark.errors import PayloadError
from tidemark.logformat import DeleteRecord, LogFileReader
from tidemark.storage import LocalStorage
from tidemark.table import properties as P
from tidemark.table.avro_schema import avro_schema_json
from tidemark.table.compaction import compact, schedule_compaction
from tidemark.table.incremental import read_incremental
from tidemark.table.merge_handle import merge_base_file
from tidemark.table.payload import rule_for_table
from tidemark.table.properties import read_properties
from tidemark.table.snapshot import read_snapshot
from tidemark.table.write_client import commit_write, create_table, load_or_create_table, start_write
from tidemark.table.write_handles import TaskContext, append_log_blocks, create_base_file
from tidemark.timeline import COMMIT, DELTA_COMMIT

MODEL = "org.apache.hudi.common.model."
TOAST = "__debezium_unavailable_value"
GROUP = "fg-0001-0"
Row = dict[str, Any]


# --- Hudi's rules, as documented, per payload -----------------------------------------------------


@dataclass(frozen=True)
class Rules:
    payload_class: str
    ordering: str
    #: the payload's delete test on a record
    is_delete: Callable[[Row], bool]
    #: preCombine(older, newer) of two log (or batch) records of one key
    pick: Callable[[Row, Row], Row]
    #: combineAndGetUpdateValue(stored, incoming); None: deleted
    merge: Callable[[Row, Row], Row | None]
    #: a delete record keeps a base row of larger ordering value (event-time rules)
    event_time_deletes: bool = False
    #: delete records are ordered against log records (all but commit-time ordering)
    log_deletes_ordered: bool = True
    merge_mode: str | None = None


def _flagged(column: str | None = None, value: str = "") -> Callable[[Row], bool]:
    """Every payload deletes on ``_hoodie_is_deleted = true``; some on their own flag too."""

    def test(row: Row) -> bool:
        flag = row.get(column) if column else None
        return row.get("_hoodie_is_deleted") is True or (flag is not None and str(flag).lower() == value.lower())

    return test


def _later(field: str) -> Callable[[Row, Row], Row]:
    """The record with the larger ordering value; the newer on ties."""
    return lambda older, newer: older if older[field] > newer[field] else newer


def _fill(winner: Row, other: Row) -> Row:
    return {k: winner.get(k) if winner.get(k) is not None else other.get(k) for k in {*winner, *other}}


def _rules(name: str) -> Rules:
    deleted = _flagged()
    later = _later("ts")
    if name == "OverwriteWithLatestAvroPayload":
        # the later write overwrites (Hudi 1.x reads it as COMMIT_TIME_ORDERING, and so does hudi-rs)
        return Rules(
            MODEL + name,
            "ts",
            deleted,
            lambda o, n: n,
            lambda s, i: None if deleted(i) else i,
            log_deletes_ordered=False,
        )
    if name in ("DefaultHoodieRecordPayload", "EVENT_TIME_ORDERING"):
        # storage keeps its record when the incoming one (a delete too) has a smaller ordering value
        return Rules(
            MODEL + "DefaultHoodieRecordPayload",
            "ts",
            deleted,
            later,
            lambda s, i: s if s["ts"] > i["ts"] else (None if deleted(i) else i),
            event_time_deletes=True,
            merge_mode="EVENT_TIME_ORDERING" if name == "EVENT_TIME_ORDERING" else None,
        )
    if name == "EventTimeAvroPayload":
        # as Default, but an incoming delete always deletes: combineAndGetUpdateValue returns
        # nothing for a delete (a delete record's empty payload too) before it compares ordering
        # values, and preCombine lets a record that arrives after an empty payload win
        return Rules(
            MODEL + name,
            "ts",
            deleted,
            later,
            lambda s, i: None if deleted(i) else (s if s["ts"] > i["ts"] else i),
        )
    if name == "OverwriteNonDefaultsWithLatestAvroPayload":
        # incoming fields that are not their default (null here) overwrite the stored ones
        return Rules(MODEL + name, "ts", deleted, later, lambda s, i: None if deleted(i) else _fill(i, s))

    if name == "PartialUpdateAvroPayload":
        # the version of larger ordering value wins, its null fields taken from the other one

        def pick(o: Row, n: Row) -> Row:
            if deleted(n) or deleted(o):
                return n
            return _fill(o, n) if o["ts"] > n["ts"] else _fill(n, o)

        def merge(s: Row, i: Row) -> Row | None:
            if deleted(i):
                return None
            return _fill(s, i) if s["ts"] > i["ts"] else _fill(i, s)

        return Rules(MODEL + name, "ts", deleted, pick, merge)
    if name == "AWSDmsAvroPayload":
        dms = _flagged("Op", "D")
        return Rules(MODEL + name, "ts", dms, later, lambda s, i: None if dms(i) else i)
    if name == "MySqlDebeziumAvroPayload":
        op = _flagged("_change_operation_type", "d")

        def position(row: Row) -> tuple[int, int]:
            file, pos = row["_event_seq"].split(".")
            return int(file), int(pos)

        # storage stays when its binlog file+position is the same or later
        return Rules(
            MODEL + "debezium." + name,
            "_event_seq",
            op,
            _later("_event_seq"),
            lambda s, i: s if position(i) <= position(s) else (None if op(i) else i),
        )
    if name == "PostgresDebeziumAvroPayload":
        op = _flagged("_change_operation_type", "d")

        def merge_pg(s: Row, i: Row) -> Row | None:
            if i["_event_lsn"] < s["_event_lsn"]:
                return s
            if op(i):
                return None
            return {k: s.get(k) if v == TOAST else v for k, v in i.items()}

        return Rules(MODEL + "debezium." + name, "_event_lsn", op, _later("_event_lsn"), merge_pg)
    if name == "COMMIT_TIME_ORDERING":
        # the latest write wins, whatever the ordering values
        return Rules(
            MODEL + "OverwriteWithLatestAvroPayload",
            "ts",
            deleted,
            lambda o, n: n,
            lambda s, i: None if deleted(i) else i,
            log_deletes_ordered=False,
            merge_mode="COMMIT_TIME_ORDERING",
        )
    raise AssertionError(name)


PAYLOADS = (
    "OverwriteWithLatestAvroPayload",
    "DefaultHoodieRecordPayload",
    "EventTimeAvroPayload",
    "OverwriteNonDefaultsWithLatestAvroPayload",
    "PartialUpdateAvroPayload",
    "AWSDmsAvroPayload",
    "MySqlDebeziumAvroPayload",
    "PostgresDebeziumAvroPayload",
    "COMMIT_TIME_ORDERING",
    "EVENT_TIME_ORDERING",
)
#: the rules hudi-rs implements (it reads EventTimeAvroPayload as EVENT_TIME_ORDERING, where an
#: older delete does not delete, while the payload's combine deletes whatever its ordering value)
HUDI_RS = (
    "OverwriteWithLatestAvroPayload",
    "DefaultHoodieRecordPayload",
    "COMMIT_TIME_ORDERING",
    "EVENT_TIME_ORDERING",
)


# --- the scenario --------------------------------------------------------------------------------

DELETE = "__delete__"  # a scenario row the payload marks as deleted


def _scenario(name: str) -> tuple[list[Row], list[list[Any]]]:
    """The base rows, then the log writes in order: each a list of rows (with ``DELETE`` for a
    row the payload marks deleted) and ``("delete", key, ts)`` delete records."""
    base = [{"id": f"k{i}", "ts": 10, "name": f"a{i}", "price": i} for i in range(1, 7)]
    writes: list[list[Any]] = [
        [
            {"id": "k1", "ts": 20, "name": "b1", "price": None},  # newer, one field null
            {"id": "k2", "ts": 5, "name": "b2", "price": 22},  # older than the base
            {"id": "k3", "ts": 20, "name": None, "price": 33, DELETE: True},  # newer delete
            {"id": "k4", "ts": 5, "name": "b4", "price": 44, DELETE: True},  # older delete
            {"id": "k7", "ts": 1, "name": "b7", "price": 7},  # a new key
        ],
        [
            {"id": "k1", "ts": 15, "name": None, "price": 11},  # older than the last log record
            {"id": "k5", "ts": 30, "name": TOAST if "Postgres" in name else None, "price": 55},
            {"id": "k7", "ts": 2, "name": "c7", "price": None, DELETE: True},  # delete of a log-only key
            ("delete", "k6", 5),  # a delete record older than the base row
            ("delete", "k5", 25),  # older than the log record before it
        ],
        [
            {"id": "k2", "ts": 10, "name": "d2", "price": None},  # same ordering value as the base
            {"id": "k7", "ts": 1, "name": "e7", "price": 8},  # after its delete, with an older ordering value
            ("delete", "k1", None),  # no ordering value: arrival order
        ],
    ]
    return base, writes


def _row(name: str, spec: Row) -> Row:
    """A scenario row in the payload's columns."""
    row = {k: v for k, v in spec.items() if k != DELETE}
    deleted = bool(spec.get(DELETE))
    ts = row["ts"]
    if name == "AWSDmsAvroPayload":
        row["Op"] = "D" if deleted else "U"
    elif "Debezium" in name:
        row["_change_operation_type"] = "d" if deleted else "u"
        if "MySql" in name:
            # binlog file, then position; file numbers differ in width, so text order would be wrong
            row["_event_seq"] = f"{ts // 10 + 9}.{ts}"
        else:
            row["_event_lsn"] = ts * 100
    else:
        row["_hoodie_is_deleted"] = deleted
    return row


def _ordering(rules: Rules, name: str, ts: int) -> Any:
    return None if ts is None else _row(name, {"id": "x", "ts": ts})[rules.ordering]


def expected(name: str, as_hudi_writes: bool) -> list[Row]:
    """The snapshot Hudi's rules give for the scenario."""
    rules = _rules(name)
    base_specs, writes = _scenario(name)
    base = {r["id"]: _row(name, r) for r in base_specs}
    logs: dict[str, Any] = {}  # key → a row, or ("tomb", ordering)
    for write in writes:
        rows = [_row(name, w) for w in write if isinstance(w, dict)]
        deletes = [(k, _ordering(rules, name, ts)) for (_, k, ts) in (w for w in write if isinstance(w, tuple))]
        if as_hudi_writes:  # Hudi's writer stores the payload's deletes as delete records
            deletes = [(r["id"], r[rules.ordering]) for r in rows if rules.is_delete(r)] + deletes
            rows = [r for r in rows if not rules.is_delete(r)]
        for r in rows:  # the data block, then the delete block
            current = logs.get(r["id"])
            if isinstance(current, tuple):
                # a delete record gives way to a later record, unless event time orders them
                keep = rules.event_time_deletes and current[1] is not None and current[1] > r[rules.ordering]
                logs[r["id"]] = current if keep else r
            else:
                logs[r["id"]] = r if current is None else rules.pick(current, r)
        for key, ordering in deletes:
            current = logs.get(key)
            natural = ordering is None
            current_ordering = current[1] if isinstance(current, tuple) else (current or {}).get(rules.ordering)
            if (
                current is not None
                and rules.log_deletes_ordered
                and not natural
                and current_ordering is not None
                and current_ordering > ordering
            ):
                continue
            logs[key] = ("tomb", None if natural else ordering)
    out = dict(base)
    for key, version in logs.items():
        stored = base.get(key)
        if isinstance(version, tuple):
            keep = (
                rules.event_time_deletes and stored and version[1] is not None and stored[rules.ordering] > version[1]
            )
            merged = stored if keep else None
        elif stored is None:
            merged = None if rules.is_delete(version) else version
        else:
            merged = rules.merge(stored, version)
        if merged is None:
            out.pop(key, None)
        else:
            out[key] = merged
    return sorted(out.values(), key=lambda r: r["id"])


# --- building the table through the write client --------------------------------------------------


def _arrow(name: str, rows: list[Row]) -> pa.Table:
    fields = [
        pa.field("id", pa.string()),
        pa.field("ts", pa.int64()),
        pa.field("name", pa.string()),
        pa.field("price", pa.int64()),
    ]
    if name == "AWSDmsAvroPayload":
        fields.append(pa.field("Op", pa.string()))
    elif "Debezium" in name:
        fields.append(pa.field("_change_operation_type", pa.string()))
        fields.append(pa.field("_event_seq", pa.string()) if "MySql" in name else pa.field("_event_lsn", pa.int64()))
    else:
        fields.append(pa.field("_hoodie_is_deleted", pa.bool_()))
    return pa.Table.from_pylist(rows, schema=pa.schema(fields))


def build_table(path: Path, name: str, as_hudi_writes: bool) -> LocalStorage:
    rules = _rules(name)
    storage = LocalStorage(path)
    extra = {P.PAYLOAD_CLASS: rules.payload_class}
    if rules.merge_mode:
        extra[P.RECORD_MERGE_MODE] = rules.merge_mode
    create_table(storage, "t", ["id"], rules.ordering, [], extra=extra)
    base_specs, writes = _scenario(name)
    base = _arrow(name, [_row(name, r) for r in base_specs])
    schema = avro_schema_json(base.schema, "t")
    inflight = start_write(storage, DELTA_COMMIT, "insert")
    ctx = TaskContext(inflight.timestamp, 0, 1, 0)
    stat = create_base_file(storage, ctx, "", GROUP, base, base["id"], schema)
    commit_write(storage, inflight, [stat], "insert", schema)
    base_instant, base_path = inflight.timestamp, stat.path
    for n, write in enumerate(writes):
        rows = [_row(name, w) for w in write if isinstance(w, dict)]
        deletes = [
            DeleteRecord(k, "", _ordering(rules, name, ts)) for (_, k, ts) in (w for w in write if isinstance(w, tuple))
        ]
        if as_hudi_writes:
            deletes = [DeleteRecord(r["id"], "", r[rules.ordering]) for r in rows if rules.is_delete(r)] + deletes
            rows = [r for r in rows if not rules.is_delete(r)]
        data = _arrow(name, rows)
        inflight = start_write(storage, DELTA_COMMIT, "upsert")
        ctx = TaskContext(inflight.timestamp, 0, 2 + n, 0)
        stat = append_log_blocks(storage, ctx, "", GROUP, base_instant, base_path, data, data["id"], deletes, schema)
        commit_write(storage, inflight, [stat], "upsert", schema)
    return storage


def _data(table: pa.Table) -> list[Row]:
    rows = [
        {k: v for k, v in r.items() if not k.startswith("_hoodie") or k == "_hoodie_is_deleted"}
        for r in table.to_pylist()
    ]
    return sorted(rows, key=lambda r: r["id"])


def _normalised(rows: list[Row]) -> list[Row]:
    return [dict(sorted(r.items())) for r in rows]


# --- tests ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("as_hudi_writes", [True, False], ids=["hudi-writer", "raw"])
@pytest.mark.parametrize("name", PAYLOADS)
def test_merged_snapshot_follows_the_payload(tmp_path: Path, name: str, as_hudi_writes: bool) -> None:
    storage = build_table(tmp_path / "t", name, as_hudi_writes)
    want = _normalised(expected(name, as_hudi_writes))
    assert _normalised(_data(read_snapshot(storage))) == want
    apache = name in HUDI_RS
    if apache:
        assert _normalised(_data(apache_snapshot(str(tmp_path / "t")))) == want
    assert compact(storage) is not None
    assert _normalised(_data(read_snapshot(storage))) == want
    if apache:
        assert _normalised(_data(apache_snapshot(str(tmp_path / "t")))) == want


def test_what_the_rules_decide_in_the_documented_cases(tmp_path: Path) -> None:
    """Spot checks of the model itself against Hudi's javadoc examples."""
    partial = {r["id"]: r for r in expected("PartialUpdateAvroPayload", True)}
    # case 1 of PartialUpdateAvroPayload's javadoc: a newer record with a null keeps the old value
    assert (partial["k5"]["name"], partial["k5"]["price"]) == ("a5", 55)
    # case 2: an older record fills the newer one's nulls
    assert (partial["k2"]["name"], partial["k2"]["price"]) == ("d2", 22)
    assert "k1" not in partial  # a delete record without ordering value deletes, whatever came before
    default = {r["id"]: r for r in expected("DefaultHoodieRecordPayload", True)}
    assert (default["k2"]["name"], default["k4"]["name"], default["k6"]["name"]) == ("d2", "a4", "a6")
    assert "k3" not in default
    overwrite = {r["id"]: r for r in expected("OverwriteWithLatestAvroPayload", True)}
    assert overwrite["k2"]["name"] == "d2"
    assert not {"k4", "k6"} & set(overwrite)
    pg = {r["id"]: r for r in expected("PostgresDebeziumAvroPayload", True)}
    assert pg["k5"]["name"] == "a5"  # a TOASTed column keeps its stored value
    mysql = {r["id"]: r for r in expected("MySqlDebeziumAvroPayload", True)}
    assert mysql["k2"]["name"] == "a2"  # the same binlog position keeps the stored row


def test_an_unknown_payload_is_refused_for_writes_and_compaction_and_warned_on_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    storage = build_table(tmp_path / "t", "OverwriteWithLatestAvroPayload", True)
    props = storage.read(".hoodie/hoodie.properties").decode()
    custom = "com.example.MyPayload"
    storage.write(
        ".hoodie/hoodie.properties",
        props.replace(MODEL + "OverwriteWithLatestAvroPayload", custom).encode(),
    )
    before = sorted((p.relative_to(tmp_path), p.stat().st_mtime_ns) for p in tmp_path.rglob("*"))
    with pytest.raises(PayloadError, match=r"cannot compact .*payload class com\.example\.MyPayload") as e:
        compact(storage)
    assert "\n" not in str(e.value)
    # the classes it does implement by their full names: a class of another package is told apart
    assert "org.apache.hudi.common.model.debezium.PostgresDebeziumAvroPayload" in str(e.value)
    with pytest.raises(PayloadError, match=r"com\.example\.MyPayload"):
        schedule_compaction(storage)
    with pytest.raises(PayloadError, match=r"cannot write to .*payload class com\.example\.MyPayload"):
        load_or_create_table(storage, "t", ["id"], "ts", [], False)
    assert sorted((p.relative_to(tmp_path), p.stat().st_mtime_ns) for p in tmp_path.rglob("*")) == before

    with caplog.at_level(logging.WARNING, logger="tidemark.read"):
        first = read_snapshot(storage)
        read_snapshot(storage)
    warned = [r.getMessage() for r in caplog.records if custom in r.getMessage()]
    assert len(warned) == 1, warned
    assert "DefaultHoodieRecordPayload" in warned[0]  # the rule used: the table has an ordering field
    # read by ordering value: k2's older update (ts 5, then 10 = the base's) wins on the tie
    assert {r["id"]: r["name"] for r in _data(first)}["k2"] == "d2"


def test_a_new_table_with_an_unknown_payload_is_refused_before_it_exists(tmp_path: Path) -> None:
    from tidemark.table.write_client import TableSettings, resolve_table_settings

    with pytest.raises(PayloadError, match=r"payload class com\.example\.Other"):
        resolve_table_settings(str(tmp_path), None, TableSettings(("id",), payload_class="com.example.Other"))
    assert not any(tmp_path.iterdir())


def test_a_custom_merger_strategy_is_refused(tmp_path: Path) -> None:
    storage = build_table(tmp_path / "t", "DefaultHoodieRecordPayload", True)
    props = storage.read(".hoodie/hoodie.properties").decode()
    storage.write(
        ".hoodie/hoodie.properties",
        (
            props + f"{P.RECORD_MERGE_MODE}=CUSTOM\n{P.RECORD_MERGE_STRATEGY_ID}=1897ef5f-18bc-4557-939c-9d6a8afd1519\n"
        ).encode(),
    )
    with pytest.raises(PayloadError, match=r"record merger strategy 1897ef5f"):
        compact(storage)


@pytest.mark.parametrize(
    "name", ["OverwriteWithLatestAvroPayload", "DefaultHoodieRecordPayload", "EventTimeAvroPayload"]
)
def test_the_vectorised_choice_is_the_row_by_row_one(name: str) -> None:
    rule = rule_for_table({P.PAYLOAD_CLASS: _rules(name).payload_class, P.PRECOMBINE_FIELD: "ts"}).rule
    stored = [{"id": str(i), "ts": s} for i, s in enumerate([1, 5, 5, None, 7, 2])]
    incoming = [{"id": str(i), "ts": n} for i, n in enumerate([2, 5, 4, 3, None, 9])]
    wins = rule.incoming_wins(pa.array([r["ts"] for r in stored]), pa.array([r["ts"] for r in incoming]))
    assert wins is not None
    assert wins.to_pylist() == [rule.combine(s, i) is i for s, i in zip(stored, incoming, strict=True)]
    if name != "OverwriteWithLatestAvroPayload":
        assert wins.to_pylist() == [True, True, False, True, True, True]


def test_a_delete_record_of_int_0_follows_arrival_order_and_of_long_0_its_value(tmp_path: Path) -> None:
    """Hudi writes key-only deletes with the int 0 ("natural order") and checks ``equals(0)``: a
    long 0 is a real ordering value, which a base row of larger value outlives (event time)."""
    storage = LocalStorage(tmp_path / "t")
    create_table(storage, "t", ["id"], "ts", [], extra={P.PAYLOAD_CLASS: MODEL + "DefaultHoodieRecordPayload"})
    base = _arrow("DefaultHoodieRecordPayload", [{"id": k, "ts": 10, "name": k, "price": 1} for k in ("k1", "k2")])
    schema = avro_schema_json(base.schema, "t")
    inflight = start_write(storage, DELTA_COMMIT, "insert")
    stat = create_base_file(storage, TaskContext(inflight.timestamp, 0, 1, 0), "", GROUP, base, base["id"], schema)
    commit_write(storage, inflight, [stat], "insert", schema)
    started = inflight.timestamp
    # one delete block each: a block holds one ordering type
    for n, delete in enumerate([DeleteRecord("k1", "", 0, "IntWrapper"), DeleteRecord("k2", "", 0, "LongWrapper")]):
        inflight = start_write(storage, DELTA_COMMIT, "delete")
        ctx = TaskContext(inflight.timestamp, 0, 2 + n, 0)
        log = append_log_blocks(storage, ctx, "", GROUP, started, stat.path, None, [], [delete], schema)
        commit_write(storage, inflight, [log], "delete", schema)
    assert [r["id"] for r in _data(read_snapshot(storage))] == ["k2"]
    assert [r["id"] for r in _data(apache_snapshot(str(tmp_path / "t")))] == ["k2"]


def _table_with_deletes(path: Path, ts: pa.DataType, stored: Any, deletes: list[list[DeleteRecord]]) -> LocalStorage:
    """A merge-on-read DefaultHoodieRecordPayload table whose ordering field ``ts`` is of type
    ``ts``: a base file of k1 and k2 at ``stored``, then one delete commit per list of ``deletes``."""
    storage = LocalStorage(path)
    create_table(storage, "t", ["id"], "ts", [], extra={P.PAYLOAD_CLASS: MODEL + "DefaultHoodieRecordPayload"})
    base = pa.table({"id": ["k1", "k2"], "ts": pa.array([stored, stored], ts), "name": ["a1", "a2"]})
    schema = avro_schema_json(base.schema, "t")
    inflight = start_write(storage, DELTA_COMMIT, "insert")
    stat = create_base_file(storage, TaskContext(inflight.timestamp, 0, 1, 0), "", GROUP, base, base["id"], schema)
    commit_write(storage, inflight, [stat], "insert", schema)
    started = inflight.timestamp
    for n, records in enumerate(deletes):
        inflight = start_write(storage, DELTA_COMMIT, "upsert")
        ctx = TaskContext(inflight.timestamp, 0, 2 + n, 0)
        log = append_log_blocks(storage, ctx, "", GROUP, started, stat.path, None, [], records, schema)
        commit_write(storage, inflight, [log], "upsert", schema)
    return storage


@pytest.mark.parametrize(
    ("ts", "older", "stored", "newer", "wrapper"),
    [
        (
            pa.timestamp("us", tz="UTC"),
            *(datetime.datetime(2025, 1, d, tzinfo=datetime.UTC) for d in (1, 2, 3)),
            "LongWrapper",
        ),
        (pa.date32(), *(datetime.date(2025, 1, d) for d in (1, 2, 3)), "DateWrapper"),
        (pa.decimal128(10, 2), Decimal("1.50"), Decimal("2.25"), Decimal("10.00"), "DecimalWrapper"),
        (pa.int32(), 1, 2, 3, "IntWrapper"),
        (pa.int64(), 1, 2, 3, "LongWrapper"),
        (pa.float32(), 1.5, 2.5, 3.5, "FloatWrapper"),
        (pa.float64(), 1.5, 2.5, 3.5, "DoubleWrapper"),
        (pa.string(), "a", "b", "c", "StringWrapper"),
    ],
)
def test_a_delete_record_carries_its_ordering_value_as_hudi_wraps_the_fields_type(
    tmp_path: Path, ts: pa.DataType, older: Any, stored: Any, newer: Any, wrapper: str
) -> None:
    """A payload delete's ordering value is stored in the wrapper Hudi's writer picks for the
    ordering field's Avro type (a timestamp as its micros in a LongWrapper, a date in a
    DateWrapper, an int in an IntWrapper...); a write with a timestamp, date or decimal ordering
    field no longer fails, and an older delete leaves the newer row (event time), a newer one
    removes it, for tidemark and Apache's reader alike."""
    from tidemark.logformat import delete_records, ordering_field_type

    schema = avro_schema_json(pa.schema([pa.field("ts", ts)]), "t")
    k1, k2 = (
        delete_records([k], "", [v], ordering_field_type(schema, "ts")) for k, v in (("k1", older), ("k2", newer))
    )
    assert k1[0].ordering_type == k2[0].ordering_type == wrapper
    storage = _table_with_deletes(tmp_path / "t", ts, stored, [k1 + k2])
    [log] = (tmp_path / "t").glob(f".{GROUP}_*.log.*")
    [block] = LogFileReader(log.read_bytes()).blocks()
    assert [(d.ordering_type or "").rsplit(".", 1)[-1] for d in block.delete_records()] == [wrapper, wrapper]
    assert [r["id"] for r in _data(read_snapshot(storage))] == ["k1"]
    assert [r["id"] for r in _data(apache_snapshot(str(tmp_path / "t")))] == ["k1"]


def test_a_delete_record_of_another_class_than_the_field_is_taken_whatever_its_value(tmp_path: Path) -> None:
    """Hudi's log scanner compares a delete's ordering value only with one of the same Java class
    (``isSameClass``): a LongWrapper against an int field (as tidemark wrote them before) removes
    the row even when the row's value is larger; an IntWrapper of the same value does not.
    (hudi-rs compares the values whatever their wrappers, and keeps k2.)"""
    storage = _table_with_deletes(
        tmp_path / "t",
        pa.int32(),
        5,
        # one delete block each: hudi-rs refuses a block of two ordering types
        [[DeleteRecord("k1", "", 3, "IntWrapper")], [DeleteRecord("k2", "", 3, "LongWrapper")]],
    )
    assert [r["id"] for r in _data(read_snapshot(storage))] == ["k1"]


def test_overwrite_non_defaults_compares_with_the_schemas_defaults() -> None:
    """A field whose schema default is 0 keeps its stored value when 0 comes in, and takes a null
    (``overwriteField``: the value equals the default); fields defaulting to null keep theirs on null."""
    schema = (
        '{"type":"record","name":"t","fields":[{"name":"id","type":"string"},'
        '{"name":"n","type":"long","default":0},{"name":"s","type":["null","string"],"default":null}]}'
    )
    props = {P.PAYLOAD_CLASS: MODEL + "OverwriteNonDefaultsWithLatestAvroPayload", P.PRECOMBINE_FIELD: "n"}
    rule = rule_for_table(props, schema).rule
    stored = {"id": "a", "n": 5, "s": "x"}
    assert rule.combine(stored, {"id": "a", "n": 0, "s": None}) == {"id": "a", "n": 5, "s": "x"}
    assert rule.combine(stored, {"id": "a", "n": None, "s": "y"}) == {"id": "a", "n": None, "s": "y"}


@pytest.mark.parametrize(
    ("column", "marker", "marked"),
    [
        (pa.array(["GONE", "gone", None, "live"]), "GONE", [True, False, False, False]),
        (pa.array([True, False, None, True]), "true", [True, False, False, True]),
        (pa.array([1, 2, None, 10], pa.int64()), "1", [True, False, False, False]),
        (pa.array([1.0, 1.5, None, 2.0]), "1.0", [True, False, False, False]),  # Java prints 1.0
    ],
)
def test_a_delete_marker_matches_as_hudi_prints_the_value(column: pa.Array, marker: str, marked: list[bool]) -> None:
    from tidemark.table.payload import with_delete_marker

    rule = rule_for_table({P.PAYLOAD_CLASS: "org.apache.hudi.common.model.DefaultHoodieRecordPayload"}).rule
    conf = {"hoodie.payload.delete.field": "state", "hoodie.payload.delete.marker": marker}
    rule = with_delete_marker(rule, conf, "t")
    # _hoodie_is_deleted is not looked at once a marker is set, as in Hudi's isDeleteRecord
    table = pa.table({"state": column, "_hoodie_is_deleted": [True] * len(column)})
    assert rule.deleted_mask(table).to_pylist() == marked
    assert [rule.is_deleted(r) for r in table.to_pylist()] == marked


# --- one table written as Hudi's writer writes upserts, on either table type ----------------------


def _upserts(path: Path, name: str, copy_on_write: bool, base: list[Row], writes: list[list[Row]]) -> list[str]:
    """A table of payload ``name`` whose file group holds ``base``, then each of ``writes``
    upserted as Hudi's writer does: the batch precombined; on merge-on-read, log blocks with a
    record the payload takes as a delete written as a delete record of its ordering value; on
    copy-on-write, the base file rewritten by the payload's merge. The instants, in order."""
    storage = LocalStorage(path)
    extra = {P.PAYLOAD_CLASS: MODEL + name}
    if copy_on_write:
        extra[P.TABLE_TYPE] = P.COPY_ON_WRITE
    create_table(storage, "t", ["id"], "ts", [], extra=extra)
    action = COMMIT if copy_on_write else DELTA_COMMIT
    rule = rule_for_table(read_properties(storage)).rule
    table = _arrow(name, base)
    schema = avro_schema_json(table.schema, "t")
    inflight = start_write(storage, action, "insert")
    stat = create_base_file(storage, TaskContext(inflight.timestamp, 0, 1, 0), "", GROUP, table, table["id"], schema)
    commit_write(storage, inflight, [stat], "insert", schema)
    instants, base_instant, base_path = [inflight.timestamp], inflight.timestamp, stat.path
    for n, write in enumerate(writes):
        rows = rule.precombine_rows(_arrow(name, write), "id")
        inflight = start_write(storage, action, "upsert")
        ctx = TaskContext(inflight.timestamp, 0, 2 + n, 0)
        if copy_on_write:
            none = rows.slice(0, 0)
            stat = merge_base_file(
                storage,
                ctx,
                "",
                GROUP,
                base_path,
                base_instant,
                rows,
                rows["id"],
                none["id"],
                none,
                none["id"],
                schema,
                rule,
            )
            base_instant, base_path = inflight.timestamp, stat.path
        else:
            deleted = rule.deleted_mask(rows)
            deletes = [DeleteRecord(r["id"], "", r["ts"]) for r in rows.filter(deleted).to_pylist()]
            data = rows.filter(pc.invert(deleted))
            stat = append_log_blocks(
                storage, ctx, "", GROUP, base_instant, base_path, data, data["id"], deletes, schema
            )
        commit_write(storage, inflight, [stat], "upsert", schema)
        instants.append(inflight.timestamp)
    return instants


def _read(path: Path, begin: str | None = None) -> list[tuple[Any, ...]]:
    """The snapshot, or the incremental read after ``begin``: id, ts, name, price, commit time."""
    storage = LocalStorage(path)
    table = read_snapshot(storage) if begin is None else read_incremental(storage, begin)
    columns = ("id", "ts", "name", "price", "_hoodie_commit_time")
    return sorted(tuple(r[c] for c in columns) for r in table.to_pylist())


def _after_compaction(path: Path, copy_on_write: bool) -> None:
    if not copy_on_write:
        assert compact(LocalStorage(path)) is not None


@pytest.mark.parametrize("copy_on_write", [False, True], ids=["merge-on-read", "copy-on-write"])
def test_event_time_payload_deletes_whatever_the_deletes_ordering_value(tmp_path: Path, copy_on_write: bool) -> None:
    """EventTimeAvroPayload's combineAndGetUpdateValue returns nothing for a delete before it
    compares ordering values: an older _hoodie_is_deleted removes the stored row, on merge-on-read
    (a delete record of that ordering value) as on copy-on-write. Two versions in one batch still
    go to the larger ordering value (its preCombine), a delete or not."""
    name = "EventTimeAvroPayload"
    base = [{"id": k, "ts": 10, "name": "a", "price": 1, "_hoodie_is_deleted": False} for k in ("k1", "k2", "k3", "k4")]
    writes = [
        [
            {"id": "k1", "ts": 5, "name": None, "price": None, "_hoodie_is_deleted": True},  # older delete
            {"id": "k2", "ts": 5, "name": "b", "price": 2, "_hoodie_is_deleted": False},  # older update: ignored
            {"id": "k3", "ts": 30, "name": None, "price": None, "_hoodie_is_deleted": True},  # the later delete...
            {"id": "k3", "ts": 20, "name": "b", "price": 3, "_hoodie_is_deleted": False},  # ...wins in the batch
            {"id": "k4", "ts": 15, "name": None, "price": None, "_hoodie_is_deleted": True},  # the earlier delete...
            {"id": "k4", "ts": 20, "name": "b", "price": 4, "_hoodie_is_deleted": False},  # ...loses in the batch
        ]
    ]
    instants = _upserts(tmp_path, name, copy_on_write, base, writes)
    want = [("k2", 10, "a", 1, instants[0]), ("k4", 20, "b", 4, instants[1])]
    assert _read(tmp_path) == want
    _after_compaction(tmp_path, copy_on_write)
    assert _read(tmp_path) == want


@pytest.mark.parametrize("copy_on_write", [False, True], ids=["merge-on-read", "copy-on-write"])
def test_a_partial_update_of_smaller_ordering_value_is_in_its_commit(tmp_path: Path, copy_on_write: bool) -> None:
    """PartialUpdateAvroPayload merges an update of smaller ordering value into the stored row (or
    the log record before it) with the meta columns of the update (Hudi's
    mergeDisorderRecordsWithMetadata): the row is of the update's commit, and an incremental read
    from the commit before returns it."""
    name = "PartialUpdateAvroPayload"
    base = [
        {"id": "k1", "ts": 20, "name": None, "price": 1, "_hoodie_is_deleted": False},
        {"id": "k2", "ts": 10, "name": None, "price": None, "_hoodie_is_deleted": False},
    ]
    writes = [
        [
            {"id": "k1", "ts": 15, "name": "a2", "price": None, "_hoodie_is_deleted": False},  # older than the base
            {"id": "k2", "ts": 12, "name": "n2", "price": None, "_hoodie_is_deleted": False},
        ],
        [{"id": "k2", "ts": 11, "name": None, "price": 3, "_hoodie_is_deleted": False}],  # older than the last write
    ]
    c1, c2, c3 = _upserts(tmp_path, name, copy_on_write, base, writes)
    k1 = ("k1", 20, "a2", 1, c2)
    k2 = ("k2", 12, "n2", 3, c3)
    reads = {None: [k1, k2], c1: [k1, k2], c2: [k2]}  # begin → rows
    assert {begin: _read(tmp_path, begin) for begin in reads} == reads
    _after_compaction(tmp_path, copy_on_write)
    assert {begin: _read(tmp_path, begin) for begin in reads} == reads
