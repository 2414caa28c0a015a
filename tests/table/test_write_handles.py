"""How a write's Parquet files are written: Hudi's codec, bloom filter, row group, page and
dictionary settings, checked before anything is written, and what they make of a base file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.support.model import apache_snapshot
from tests.support.table_builder import TableBuilder
from tidemark.errors import TableError
from tidemark.storage import LocalStorage, open_storage
from tidemark.table.write_handles import ParquetConfig, write_base_file


def test_parquet_settings_follow_hudis_keys() -> None:
    assert ParquetConfig.from_conf({}) == ParquetConfig("snappy", bloom_filter=True)
    assert ParquetConfig.from_conf({"hoodie.parquet.compression.codec": " ZSTD "}).compression == "zstd"
    assert ParquetConfig.from_conf({"hoodie.parquet.compression.codec": "uncompressed"}).compression == "none"
    assert not ParquetConfig.from_conf({"hoodie.parquet.bloom.filter.enabled": "false"}).bloom_filter
    # a BLOOM index reads the filters, so Hudi writes them whatever the switch says
    for index in ("BLOOM", "GLOBAL_BLOOM"):
        conf = {"hoodie.parquet.bloom.filter.enabled": "false", "hoodie.index.type": index}
        assert ParquetConfig.from_conf(conf).bloom_filter


@pytest.mark.parametrize(
    ("conf", "message"),
    [
        ({"hoodie.parquet.compression.codec": "lzo"}, "hoodie.parquet.compression.codec='lzo': tidemark writes"),
        ({"hoodie.parquet.compression.codec": "brotli"}, "snappy, gzip, zstd, uncompressed"),
        ({"hoodie.parquet.bloom.filter.enabled": "yes"}, "hoodie.parquet.bloom.filter.enabled='yes': expected"),
    ],
)
def test_a_setting_tidemark_cannot_honour_is_refused(conf: dict[str, str], message: str) -> None:
    with pytest.raises(TableError, match=message):
        ParquetConfig.from_conf(conf)


def test_row_group_page_and_dictionary_settings_are_hudis() -> None:
    assert ParquetConfig.from_conf({}) == ParquetConfig(
        "snappy", row_group_bytes=120 * 1024 * 1024, page_bytes=1024 * 1024, dictionary=True
    )
    conf = {
        "hoodie.parquet.block.size": "4194304",
        "hoodie.parquet.page.size": "65536",
        "hoodie.parquet.dictionary.enabled": "FALSE",
    }
    assert ParquetConfig.from_conf(conf) == ParquetConfig(
        "snappy", row_group_bytes=4 * 1024 * 1024, page_bytes=64 * 1024, dictionary=False
    )


@pytest.mark.parametrize(
    ("conf", "message"),
    [
        ({"hoodie.parquet.block.size": "120MB"}, "hoodie.parquet.block.size='120MB': expected a whole number"),
        ({"hoodie.parquet.page.size": "0"}, "hoodie.parquet.page.size=0: must be at least 1"),
        ({"hoodie.parquet.dictionary.enabled": "on"}, "hoodie.parquet.dictionary.enabled='on': expected true or false"),
    ],
)
def test_a_bad_size_or_switch_is_refused_naming_it(conf: dict[str, str], message: str) -> None:
    with pytest.raises(TableError, match=message):
        ParquetConfig.from_conf(conf)


def _base_file(tmp_path: Path, rows: int, parquet: ParquetConfig) -> pq.FileMetaData:
    table = pa.table(
        {
            "_hoodie_record_key": pa.array([f"key-{i:08d}" for i in range(rows)]),
            "city": pa.array([("austin", "boston", "chicago")[i % 3] for i in range(rows)]),
            "fare": pa.array(np.random.default_rng(7).random(rows)),
        }
    )
    storage = open_storage(str(tmp_path))
    write_base_file(storage, "f.parquet", table, None, parquet)
    return pq.read_metadata(tmp_path / "f.parquet")


def _compressed(meta: pq.FileMetaData, group: int) -> int:
    rg = meta.row_group(group)
    return sum(rg.column(c).total_compressed_size for c in range(rg.num_columns))


def test_base_files_are_cut_into_row_groups_of_the_block_size_on_disk(tmp_path: Path) -> None:
    # Hudi's default: a file this size is one row group (pyarrow alone would cut at 1Mi rows)
    meta = _base_file(tmp_path, 1_200_000, ParquetConfig())
    assert meta.num_row_groups == 1
    # 1 MiB blocks: groups of about that size on disk, as parquet-mr cuts them
    meta = _base_file(tmp_path, 1_200_000, ParquetConfig(row_group_bytes=1024 * 1024))
    sizes = [_compressed(meta, g) for g in range(meta.num_row_groups)]
    assert meta.num_row_groups > 5
    assert all(0.7 * 1024 * 1024 <= size <= 1.3 * 1024 * 1024 for size in sizes[:-1]), sizes
    assert sum(meta.row_group(g).num_rows for g in range(meta.num_row_groups)) == 1_200_000


def test_page_size_and_dictionary_reach_the_base_file(tmp_path: Path) -> None:
    default = _base_file(tmp_path, 200_000, ParquetConfig())
    city = default.row_group(0).column(1)
    assert city.has_dictionary_page
    plain = _base_file(tmp_path, 200_000, ParquetConfig(dictionary=False))
    assert not any(plain.row_group(0).column(c).has_dictionary_page for c in range(3))
    # 4 KiB pages: each page has its own header, so the same column takes more room than in 1 MiB
    # pages (about 400 pages of a 1.6 MB column against two)
    small_pages = _base_file(tmp_path, 200_000, ParquetConfig(dictionary=False, page_bytes=4096))
    fares = plain.row_group(0).column(2).total_uncompressed_size
    assert small_pages.row_group(0).column(2).total_uncompressed_size > fares + 300 * 8


def test_a_new_partition_of_a_table_with_base_format_metafiles_gets_hudis_parquet_metafile(tmp_path: Path) -> None:
    """Where the table sets hoodie.partition.metafile.use.base.format=true, Hudi's writers make
    each new partition's metafile a Parquet file holding the properties in its footer; tidemark
    wrote the text file, a second kind of metafile in a table that has the other."""
    t = TableBuilder(LocalStorage(tmp_path), properties={"hoodie.partition.metafile.use.base.format": "true"})
    first = t.insert(["a"], 1)
    second = t.upsert(["b"], 2, partition="p=2/q=3")
    t.upsert(["a", "c"], 4)
    for partition, depth, created in (("p=1", "1", first), ("p=2/q=3", "2", second)):
        metafiles = sorted(p.name for p in (tmp_path / partition).glob(".hoodie_partition_metadata*"))
        assert metafiles == [".hoodie_partition_metadata.parquet"]
        footer = pq.read_metadata(tmp_path / partition / metafiles[0]).metadata
        assert footer == {b"commitTime": created.encode(), b"partitionDepth": depth.encode()}
    rows = [("a", 4), ("b", 2), ("c", 4)]
    assert sorted((r["id"], r["v"]) for r in t.rows()) == rows
    assert sorted((r["id"], r["v"]) for r in apache_snapshot(str(tmp_path)).to_pylist()) == rows
