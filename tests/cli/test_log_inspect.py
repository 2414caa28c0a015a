"""``tidemark log inspect`` as a user runs it: a subprocess on a local or s3:// path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.logformat.samples import every_block_type
from tests.support.cli import tidemark
from tests.support.fixtures import fixture_log_files, fixtures_root
from tidemark.logformat import LogWriter
from tidemark.logformat.block import BlockSpec, BlockType
from tidemark.logformat.content import encode_avro_records
from tidemark.storage import S3Options, open_storage

JSON_KEYS = {"offset", "type", "version", "headers", "content_length", "record_count", "corrupt"}


@pytest.fixture
def written_log(tmp_path: Path) -> Path:
    from tidemark.storage import LocalStorage

    result = LogWriter(LocalStorage(tmp_path), "", "file-1", "20250101000000000", "0-1-0").append(every_block_type())
    return tmp_path / result.path


def _json_lines(out: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.splitlines()]


def test_json_output_has_exactly_the_documented_keys(written_log: Path) -> None:
    proc = tidemark("log", "inspect", str(written_log), "--json")
    assert proc.returncode == 0, proc.stderr
    blocks = _json_lines(proc.stdout)
    assert [b["type"] for b in blocks] == [
        "AVRO_DATA_BLOCK",
        "DELETE_BLOCK",
        "PARQUET_DATA_BLOCK",
        "AVRO_DATA_BLOCK",
        "COMMAND_BLOCK",
    ]
    for b in blocks:
        assert set(b) == JSON_KEYS
        assert b["version"] == 1
        assert b["corrupt"] is None
    assert [b["record_count"] for b in blocks] == [5, 3, 2, 1, None]
    assert blocks[3]["headers"]["BLOCK_IDENTIFIER"] == "0,1"  # type: ignore[index]
    assert blocks[4]["headers"] == {
        "INSTANT_TIME": "20250101000000009",
        "COMMAND_BLOCK_TYPE": "0",
        "TARGET_INSTANT_TIME": "20250101000000005",
    }


def test_records_follow_their_block(written_log: Path) -> None:
    proc = tidemark("log", "inspect", str(written_log), "--json", "--records")
    lines = _json_lines(proc.stdout)
    first_block = lines[0]
    records = [line for line in lines if "record" in line and line.get("block_offset") == first_block["offset"]]
    assert [r["record"]["_hoodie_record_key"] for r in records] == [f"key-{i:06d}" for i in range(5)]  # type: ignore[index]
    # binary values print as hex
    assert records[1]["record"]["payload"] == "01"  # type: ignore[index]
    text = tidemark("log", "inspect", str(written_log), "--records").stdout
    assert '"recordKey":"key-000002"' in text
    assert "attempt=0 seq=1" in text  # the BLOCK_IDENTIFIER header, spelled out
    assert "5 blocks, 0 corrupt" in text


def test_damaged_file_shows_recovery(written_log: Path, tmp_path: Path) -> None:
    data = bytearray(written_log.read_bytes())
    blocks = _json_lines(tidemark("log", "inspect", str(written_log), "--json").stdout)
    second = int(blocks[1]["offset"])  # type: ignore[arg-type]
    data[second + 10] ^= 0xFF  # the second block's size field
    damaged = tmp_path / ".damaged_20250101000000000.log.1_0-1-0"
    damaged.write_bytes(bytes(data[:-5]))  # and the last block truncated
    proc = tidemark("log", "inspect", str(damaged), "--json")
    assert proc.returncode == 0
    got = _json_lines(proc.stdout)
    corrupt = [b["corrupt"] for b in got if b["corrupt"] is not None]
    assert corrupt == [
        {"start": second, "end": int(blocks[2]["offset"])},  # type: ignore[arg-type]
        {"start": int(blocks[4]["offset"]), "end": len(data) - 5},  # type: ignore[arg-type]
    ]
    assert [b["type"] for b in got] == [
        "AVRO_DATA_BLOCK",
        "CORRUPT_BLOCK",
        "PARQUET_DATA_BLOCK",
        "AVRO_DATA_BLOCK",
        "CORRUPT_BLOCK",
    ]
    text = tidemark("log", "inspect", str(damaged)).stdout
    assert "CORRUPT_BLOCK" in text
    assert "2 corrupt" in text


def test_every_fixture_inspects() -> None:
    fixtures_root()
    for path in fixture_log_files():
        proc = tidemark("log", "inspect", str(path), "--json", "--records")
        assert proc.returncode == 0, proc.stderr
        lines = _json_lines(proc.stdout)
        assert lines[0]["corrupt"] is None
        assert "error" not in proc.stdout


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    proc = tidemark("log", "inspect", str(tmp_path / "nope.log"))
    assert proc.returncode == 1
    assert "no such file" in proc.stderr
    assert str(tmp_path / "nope.log") in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_folder_is_said_to_be_one(tmp_path: Path) -> None:
    proc = tidemark("log", "inspect", str(tmp_path))
    assert proc.returncode == 1
    assert f"is a folder, not a file: {tmp_path}" in proc.stderr


def test_a_root_or_no_location_is_named_as_given() -> None:
    for given, said in (("/", "not a file location: /"), ("", "no file location given")):
        proc = tidemark("log", "inspect", given)
        assert proc.returncode == 1
        assert proc.stderr == f"tidemark: error: {said}\n"  # not the current directory


def test_a_schema_header_that_is_json_but_no_record_schema_is_shown_by_its_size(tmp_path: Path) -> None:
    # a foreign or damaged writer's: the text output showed one block, then a TypeError traceback
    record = json.dumps({"type": "record", "name": "r", "fields": [{"name": "a", "type": "string"}]})
    odd = ['{"type":"record","name":"r","fields":null}', '{"fields":5}', '["a"]', '"text"']
    blocks = [
        BlockSpec(
            BlockType.AVRO_DATA_BLOCK, {0: "20250101000000000", 2: record}, encode_avro_records([{"a": "x"}], record)
        )
    ]
    blocks += [BlockSpec(BlockType.DELETE_BLOCK, {0: f"2025010100000000{i}", 2: s}, b"") for i, s in enumerate(odd, 1)]
    log = tmp_path / ".f_20250101000000000.log.1_0-1-0"
    log.write_bytes(b"".join(b.encode() for b in blocks))
    proc = tidemark("log", "inspect", str(log))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "SCHEMA=<avro record r, 1 fields>" in lines[0]
    assert [line.split("SCHEMA=")[1] for line in lines[1:5]] == [f"<{len(s)} chars>" for s in odd]
    assert lines[5].endswith("5 blocks, 0 corrupt (0 bytes skipped)")


def test_a_location_without_a_bucket_names_what_was_given() -> None:
    proc = tidemark("log", "inspect", "s3:/bad")
    assert proc.returncode == 1
    assert "s3:/bad: s3 location has no bucket" in proc.stderr


def test_unsupported_scheme_is_a_clear_error() -> None:
    proc = tidemark("log", "inspect", "hdfs://nn/x.log")
    assert proc.returncode == 1
    assert "unsupported location scheme 'hdfs'" in proc.stderr


@pytest.mark.s3
def test_inspect_on_s3(s3_location: tuple[str, S3Options]) -> None:
    location, options = s3_location
    storage = open_storage(location, options)
    result = LogWriter(storage, "city=chennai", "file-1", "20250101000000000", "0-1-0").append(every_block_type())
    uri = storage.full_uri(result.path)
    assert uri.startswith("s3://")
    proc = tidemark("log", "inspect", uri, "--json", "--records", "--s3-endpoint", str(options.endpoint_url))
    assert proc.returncode == 0, proc.stderr
    lines = _json_lines(proc.stdout)
    assert [b["type"] for b in lines if "type" in b][-1] == "COMMAND_BLOCK"
    assert sum(1 for line in lines if "record" in line) == 5 + 3 + 2 + 1
    # the endpoint can come from the environment too
    env_proc = tidemark("log", "inspect", uri, env={"TIDEMARK_S3_ENDPOINT": str(options.endpoint_url)})
    assert env_proc.returncode == 0, env_proc.stderr
    assert "5 blocks, 0 corrupt" in env_proc.stdout
    # the folder that holds it is a folder, not a missing file
    folder = storage.full_uri("city=chennai")
    folder_proc = tidemark("log", "inspect", folder, "--s3-endpoint", str(options.endpoint_url))
    assert folder_proc.returncode == 1
    assert f"is a folder, not a file: {folder}" in folder_proc.stderr
    missing_proc = tidemark("log", "inspect", f"{folder}/nope.log", "--s3-endpoint", str(options.endpoint_url))
    assert missing_proc.returncode == 1
    assert "no such file" in missing_proc.stderr
    # a bucket the endpoint does not have is named as such, as other commands name it
    bucket = uri.removeprefix("s3://").split("/")[0]
    nobucket_proc = tidemark(
        "log", "inspect", uri.replace(bucket, "no-such-bucket", 1), "--s3-endpoint", str(options.endpoint_url)
    )
    assert nobucket_proc.returncode == 1
    assert f"bucket 'no-such-bucket' does not exist at the S3 endpoint {options.endpoint_url}" in nobucket_proc.stderr


def test_records_print_maps_as_objects_and_decimals_in_plain_digits_in_every_block_format(tmp_path: Path) -> None:
    import decimal

    import pyarrow as pa

    from tidemark.logformat import avro_data_block, parquet_data_block
    from tidemark.storage import LocalStorage
    from tidemark.table.avro_schema import avro_schema_json, plain_rows

    table = pa.table(
        {
            "m": pa.array([[("z", None), ("k", 2)]], pa.map_(pa.string(), pa.int64())),
            "d": pa.array([decimal.Decimal("-1E-10")], pa.decimal128(18, 10)),
        }
    )
    schema = avro_schema_json(table.schema, "t", with_meta_fields=False)
    instant = "20250101000000000"
    blocks = [parquet_data_block(table, schema, instant), avro_data_block(plain_rows(table), schema, instant)]
    log = LogWriter(LocalStorage(tmp_path), "", "file-1", "20250101000000000", "0-1-0").append(blocks)
    out = tidemark("log", "inspect", str(tmp_path / log.path), "--records", "--json")
    assert out.returncode == 0, out.stderr
    records = [line["record"] for line in _json_lines(out.stdout) if "record" in line]
    assert records == [{"m": {"z": None, "k": 2}, "d": "-0.0000000001"}] * 2
