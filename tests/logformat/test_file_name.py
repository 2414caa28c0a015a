from __future__ import annotations

import random

import pytest

from tidemark.errors import InvalidBaseFileNameError, InvalidLogFileNameError
from tidemark.logformat import BaseFileName, LogFileName, WriteToken


def test_parse_and_build_log_file_name() -> None:
    name = ".ff32ab89-5ad0-4968-83b4-89a34c95d32f-0_20250316025816068.log.1_0-54-122"
    parsed = LogFileName.parse(name)
    assert parsed == LogFileName("ff32ab89-5ad0-4968-83b4-89a34c95d32f-0", "20250316025816068", 1, "0-54-122")
    assert parsed.name == name
    assert LogFileName.parse(f"city=chennai/{name}") == parsed
    assert WriteToken.parse("0-54-122") == WriteToken(0, 54, 122)
    assert str(WriteToken(0, 54, 122)) == "0-54-122"


def test_file_id_with_underscores_and_archive_and_cdc_names() -> None:
    assert LogFileName.parse(".my_file_id_20250101000000000.log.3_1-2-3").file_id == "my_file_id"
    archive = LogFileName.parse(".commits_.archive.1_1-0-1")
    assert (archive.file_id, archive.base_instant, archive.extension) == ("commits", "", "archive")
    assert archive.name == ".commits_.archive.1_1-0-1"
    cdc = LogFileName.parse(".f1_20250101000000000.log.1_0-1-2.cdc")
    assert cdc.suffix == ".cdc"
    assert cdc.name == ".f1_20250101000000000.log.1_0-1-2.cdc"


@pytest.mark.parametrize(
    "bad",
    ["f1_20250101000000000.log.1_0-1-2", ".f1_2025.log.x_0-1-2", ".f1_2025.log.1_0-1", "", ".log.1_0-1-2"],
)
def test_invalid_log_file_names(bad: str) -> None:
    assert not LogFileName.is_log_file(bad)
    with pytest.raises(InvalidLogFileNameError, match="not a Hudi log file name"):
        LogFileName.parse(bad)


def test_ordering_matches_hudi() -> None:
    """Base instant, then version, then write token (as a string, absent first)."""
    ordered = [
        LogFileName("f", "20250101000000000", 1, None),
        LogFileName("f", "20250101000000000", 1, "0-1-1"),
        LogFileName("f", "20250101000000000", 1, "1-1-0"),
        LogFileName("f", "20250101000000000", 2, "0-1-0"),
        LogFileName("f", "20250101000000000", 10, "0-1-0"),
        LogFileName("f", "20250102000000000", 1, "0-0-0"),
    ]
    shuffled = ordered[:]
    random.Random(7).shuffle(shuffled)
    assert sorted(shuffled) == ordered


def test_roll_over() -> None:
    name = LogFileName("f", "20250101000000000", 1, "0-1-0")
    assert name.roll_over() == LogFileName("f", "20250101000000000", 2, "0-1-0")
    assert name.roll_over("3-4-5").write_token == "3-4-5"


def test_base_file_name() -> None:
    name = "d206069c-22c8-4532-b9ea-3cf4282342c4-0_0-13-23_20250117083125837.parquet"
    parsed = BaseFileName.parse(name)
    assert parsed == BaseFileName("d206069c-22c8-4532-b9ea-3cf4282342c4-0", "0-13-23", "20250117083125837")
    assert parsed.name == name
    for bad in ["x.parquet", "a_b_c.parquet", "f_0-1-2_notdigits.parquet", "f_0-1-2_123"]:
        with pytest.raises(InvalidBaseFileNameError):
            BaseFileName.parse(bad)
