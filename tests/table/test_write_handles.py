"""How a write's Parquet files are written: Hudi's codec and bloom filter settings, checked before
anything is written."""

from __future__ import annotations

import pytest

from tidemark.errors import TableError
from tidemark.table.write_handles import ParquetConfig


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
