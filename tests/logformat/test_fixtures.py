"""Log files written by Apache Hudi (Spark): tidemark reads them right and writes them back
byte for byte. Expectations come from the SQL beside each fixture."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.fixtures import (
    extract_table,
    fixture_log_files,
    fixtures_root,
    sql_inserts,
    sql_statements,
    table_zips,
)
from tidemark.logformat import (
    BlockSpec,
    BlockType,
    HeaderKey,
    LogBlock,
    LogFileName,
    LogFileReader,
    delete_block,
    delete_records,
    read_blocks,
)
from tidemark.logformat.content import encode_avro_records, encode_delete_records
from tidemark.storage import LocalStorage


def _blocks(path: Path) -> list[LogBlock]:
    source = LocalStorage(path.parent).open_input(path.name)
    return read_blocks(source)


def _sql_comment_instants(sql: Path) -> list[str]:
    return re.findall(r"`(\d{17})`", sql.read_text())


def _all_fixture_logs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    logs = list(fixture_log_files())
    for zip_path in table_zips():
        table = extract_table(zip_path, tmp_path_factory.mktemp(zip_path.stem))
        logs.extend(sorted(table.rglob(".*.log.*")))
    return logs


@pytest.fixture(scope="module")
def every_fixture_log(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    fixtures_root()
    logs = _all_fixture_logs(tmp_path_factory)
    assert len(logs) >= 7, f"expected the 4 single log files and 3 table log files, found {logs}"
    return logs


def test_every_fixture_log_reads_without_corruption(every_fixture_log: list[Path]) -> None:
    for path in every_fixture_log:
        blocks = _blocks(path)
        assert blocks, path
        for block in blocks:
            assert block.corrupt is None, (path, block.corrupt)
            assert block.version == 1
            assert HeaderKey.INSTANT_TIME in block.headers
            assert re.fullmatch(r"\d{17}", block.instant_time or ""), block.instant_time
        assert blocks[-1].end == path.stat().st_size
        LogFileName.parse(path.name)  # every fixture name parses


def test_byte_identical_round_trip(every_fixture_log: list[Path]) -> None:
    """Reading each fixture and writing its blocks back, same headers, same order: same bytes."""
    for path in every_fixture_log:
        original = path.read_bytes()
        rewritten = b"".join(block.to_spec().encode() for block in _blocks(path))
        assert rewritten == original, path


def test_round_trip_through_decoded_records(every_fixture_log: list[Path]) -> None:
    """Decoding Avro and delete contents and encoding the records again gives the same bytes."""
    checked = 0
    for path in every_fixture_log:
        for block in _blocks(path):
            if block.block_type is BlockType.AVRO_DATA_BLOCK:
                assert block.schema is not None
                content = encode_avro_records(block.avro_records(), block.schema)
            elif block.block_type is BlockType.DELETE_BLOCK:
                content = encode_delete_records(block.delete_records())
            else:
                continue
            assert content == block.content(), path
            rebuilt = BlockSpec(block.block_type, dict(block.headers), content).encode()
            assert rebuilt == path.read_bytes()[block.offset : block.end]
            checked += 1
    assert checked >= 3


def _single(kind: str) -> tuple[Path, list[LogBlock]]:
    root = fixtures_root()
    [path] = sorted((root / "log_files" / kind).glob(".*.log.*"))
    return path, _blocks(path)


def test_delete_block_matches_its_sql() -> None:
    path, [block] = _single("valid_log_delete")
    sql = path.parent / "datagen.sql"
    [instant] = _sql_comment_instants(sql)
    [rows] = sql_inserts(sql)
    [delete] = [s for s in sql_statements(sql) if s.upper().startswith("DELETE")]
    riders = set(re.findall(r"'([^']+)'", delete.split("in", 1)[1]))
    expected = {(r["uuid"], f"city={r['city']}") for r in rows if r["rider"] in riders}

    assert block.block_type is BlockType.DELETE_BLOCK
    assert block.instant_time == instant
    assert block.record_count() == len(expected) == 3
    deleted = block.delete_records()
    assert {(d.record_key, d.partition_path) for d in deleted} == expected
    assert all(d.ordering_value == 0 for d in deleted)  # Spark SQL DELETE carries no precombine value


def test_a_delete_without_ordering_value_is_written_as_hudi_writes_it() -> None:
    """The delete operation's records (and payload deletes on a table without ordering field)
    hold the int 0, Hudi's natural order (its ``DeleteRecord.create(key)``), as the Spark SQL
    DELETE of the fixture does, not null: Hudi 0.14/0.15's log scanner fails on a null."""
    _, [block] = _single("valid_log_delete")
    hudi = {(d.ordering_value, d.ordering_type) for d in block.delete_records()}
    spec = delete_block(delete_records(["k1", "k2"], "city=sf", None), block.instant_time or "")
    [written] = LogFileReader(spec.encode()).blocks()
    ours = {(d.ordering_value, d.ordering_type) for d in written.delete_records()}
    assert ours == hudi == {(0, "org.apache.hudi.avro.model.IntWrapper")}


def test_rollback_block_matches_its_sql() -> None:
    path, [block] = _single("valid_log_rollback")
    rollback_instant, target = _sql_comment_instants(path.parent / "datagen.sql")
    assert block.block_type is BlockType.COMMAND_BLOCK
    assert block.is_rollback
    assert block.instant_time == rollback_instant
    assert block.header(HeaderKey.TARGET_INSTANT_TIME) == target
    assert block.content_length == 0
    assert block.record_count() is None
    name = LogFileName.parse(path.name)
    assert (name.version, name.write_token) == (2, "1-0-1")


def test_avro_and_parquet_single_files_hold_one_updated_trip() -> None:
    # both are the Hudi quickstart's update of rider-A (no SQL beside them): the same record
    # written once as an Avro block and once as a Parquet block must decode to the same values
    _, [avro] = _single("valid_log_avro_data")
    _, [parquet] = _single("valid_log_parquet_data")
    assert avro.block_type is BlockType.AVRO_DATA_BLOCK
    assert parquet.block_type is BlockType.PARQUET_DATA_BLOCK
    [a] = avro.avro_records()
    [p] = parquet.records()
    user_fields = ["ts", "uuid", "rider", "driver", "fare", "city"]
    assert {k: a[k] for k in user_fields} == {k: p[k] for k in user_fields}
    assert a["_hoodie_record_key"] == a["uuid"]
    assert a["_hoodie_commit_time"] == avro.instant_time
    assert p["_hoodie_commit_time"] == parquet.instant_time


def test_trips_table_log_holds_the_sql_update(tmp_path: Path) -> None:
    root = fixtures_root()
    sql = root / "tables/mor/v6_trips_8i1u.sql"
    table = extract_table(root / "tables/mor/v6_trips_8i1u.zip", tmp_path)
    [log] = list(table.rglob(".*.log.*"))
    [rows] = sql_inserts(sql)
    update = next(s for s in sql_statements(sql) if s.upper().startswith("UPDATE"))
    new_fare = float(re.search(r"fare\s*=\s*([\d.]+)", update)[1])  # type: ignore[index]
    rider = re.search(r"rider\s*=\s*'([^']+)'", update)[1]  # type: ignore[index]
    expected = next(r for r in rows if r["rider"] == rider) | {"fare": new_fare}

    [block] = _blocks(log)
    assert block.block_type is BlockType.AVRO_DATA_BLOCK
    [record] = block.avro_records()
    assert {k: record[k] for k in expected} == expected
    assert record["_hoodie_partition_path"] == f"city={expected['city']}"
    assert log.parent.name == record["_hoodie_partition_path"]
    assert LogFileName.parse(log.name).file_id == record["_hoodie_file_name"]


@pytest.mark.parametrize("name", ["v6_nonpartitioned", "v6_simplekeygen_nonhivestyle"])
def test_parquet_log_blocks_hold_the_second_insert_upserts(name: str, tmp_path: Path) -> None:
    """The second INSERT re-inserts id 1 with isActive flipped: an update, so it goes to the log
    of id 1's file group as a Parquet block; the other row is new and gets its own base file."""
    root = fixtures_root()
    sql = root / f"tables/mor/{name}.sql"
    table = extract_table(root / f"tables/mor/{name}.zip", tmp_path)
    [log] = list(table.rglob(".*.log.*"))
    first, second = sql_inserts(sql)
    first_ids = {r["id"] for r in first}
    updates = [r for r in second if r["id"] in first_ids]

    [block] = _blocks(log)
    assert block.block_type is BlockType.PARQUET_DATA_BLOCK
    records = block.records()
    assert len(records) == len(updates) == 1
    scalar = ["id", "name", "isActive", "shortField", "intField", "longField", "floatField", "doubleField"]
    for want, got in zip(updates, records, strict=True):
        assert {k: got[k] for k in scalar} == {k: want[k] for k in scalar}
        assert float(got["decimalField"]) == pytest.approx(want["decimalField"])
        assert got["_hoodie_commit_time"] == block.instant_time
