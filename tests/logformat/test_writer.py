"""The log writer on local storage and on S3 (moto server over HTTP)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.logformat.samples import every_block_type
from tidemark.logformat import LogFileName, LogWriter, list_log_files, read_blocks, rollback_block
from tidemark.storage import LocalStorage, S3Options, Storage, open_storage

FILE_ID = "6d3d1d6e-2298-4080-a0c1-494877d6f40a-0"
BASE = "20250101000000000"


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Storage:
    if request.param == "local":
        return LocalStorage(tmp_path)
    location, options = request.getfixturevalue("s3_location")
    return open_storage(location, options)


def _read_all(storage: Storage, partition: str) -> list[tuple[str, int]]:
    out = []
    for name in list_log_files(storage, partition, FILE_ID, BASE):
        with storage.open_input(f"{partition}/{name.name}") as source:
            out.extend((name.name, b.offset) for b in read_blocks(source) if b.corrupt is None)
    return out


def test_written_blocks_read_back(storage: Storage) -> None:
    writer = LogWriter(storage, "city=chennai", FILE_ID, BASE, "0-1-0")
    specs = every_block_type()
    result = writer.append(specs)
    assert result.log_file == LogFileName(FILE_ID, BASE, 1, "0-1-0")
    assert result.path == f"city=chennai/{result.log_file.name}"
    assert storage.size(result.path) == result.size
    with storage.open_input(result.path) as source:
        blocks = read_blocks(source)
        assert [b.offset for b in blocks] == list(result.block_offsets)
        assert [b.to_spec() for b in blocks] == specs
        assert blocks[0].records()[0]["_hoodie_record_key"] == "key-000000"


def test_appends_continue_or_roll_over_by_storage(storage: Storage) -> None:
    writer = LogWriter(storage, "p", FILE_ID, BASE, "0-1-0")
    first = writer.append(every_block_type()[:2])
    second = writer.append(every_block_type()[2:])
    if storage.supports_append:
        assert second.log_file == first.log_file
        assert second.block_offsets[0] == first.size
    else:  # object stores: one new log version per append, as Hudi does on S3
        assert second.log_file == first.log_file.roll_over()
        assert second.block_offsets[0] == 0
    assert len(_read_all(storage, "p")) == len(every_block_type())


def test_rollover_past_threshold(storage: Storage) -> None:
    writer = LogWriter(storage, "p", FILE_ID, BASE, "0-1-0", rollover_bytes=1500)
    versions = [writer.append([spec]).log_file.version for spec in every_block_type()]
    assert versions == sorted(versions)
    assert versions[-1] > 1
    assert len(_read_all(storage, "p")) == len(every_block_type())


def test_a_new_writer_token_starts_a_new_version(storage: Storage) -> None:
    LogWriter(storage, "p", FILE_ID, BASE, "0-1-0").append(every_block_type()[:1])
    retry = LogWriter(storage, "p", FILE_ID, BASE, "0-1-1")
    result = retry.append([rollback_block("20250101000000005", BASE)])
    assert result.log_file == LogFileName(FILE_ID, BASE, 2, "0-1-1")
    names = list_log_files(storage, "p", FILE_ID, BASE)
    assert [n.version for n in names] == [1, 2]


def test_reopened_writer_continues_its_own_file(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path)
    first = LogWriter(storage, "", FILE_ID, BASE, "0-1-0").append(every_block_type()[:1])
    again = LogWriter(storage, "", FILE_ID, BASE, "0-1-0").append(every_block_type()[1:2])
    assert again.log_file == first.log_file
    assert again.block_offsets == (first.size,)


def test_s3_options_reach_the_writer(s3_location: tuple[str, S3Options]) -> None:
    location, options = s3_location
    storage = open_storage(location, options)
    result = LogWriter(storage, "a/b", FILE_ID, BASE, "0-1-0").append(every_block_type())
    assert storage.full_uri(result.path).startswith("s3://")
    assert storage.exists(result.path)
