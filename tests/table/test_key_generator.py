"""Record keys and partition paths as Apache Hudi computes them.

Where each expected value comes from:
* the fixture tables: every row of every base file Apache Hudi wrote carries the key and the
  partition path Hudi's key generator gave it (``_hoodie_record_key``,
  ``_hoodie_partition_path``); tidemark's key generator must give the same from the row's values;
* the examples of Hudi's key generation guide (hudi.apache.org/docs/key_generation,
  "TimestampBasedKeyGenerator" section), quoted beside each case;
* Hudi's source (``KeyGenUtils``, ``TimestampBasedAvroKeyGenerator``, ``ComplexKeyGenEncoding``,
  ``PartitionPathEncodeUtils``) for nulls, empties, encodings and escaping, named beside each case.
"""

from __future__ import annotations

import datetime
import decimal
import re
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.support.fixtures import extract_table, table_zips
from tidemark.errors import KeyGeneratorError
from tidemark.storage import LocalStorage
from tidemark.table import key_generator as KG
from tidemark.table.key_generator import build_key_generator
from tidemark.table.properties import read_properties

TABLES = [p for p in table_zips() if "no_metafields" not in p.name]


@pytest.mark.parametrize("zip_path", TABLES, ids=[p.stem for p in TABLES])
def test_keys_and_paths_of_every_row_apache_wrote(zip_path: Path, tmp_path: Path) -> None:
    table = extract_table(zip_path, tmp_path)
    props = read_properties(LocalStorage(table))
    keygen = build_key_generator(
        props.key_generator_class or "",
        props.record_key_fields,
        ",".join(props.partition_fields),
        props,
        hive_style=props.hive_style_partitioning,
        url_encode=props.url_encode_partitions,
        text_partition=True,
    )
    rows = [r for f in sorted(table.rglob("*.parquet")) for r in pq.read_table(f).to_pylist()]
    if "empty" not in zip_path.stem:
        assert rows
    for row in rows:
        assert keygen.record_key(row) == row["_hoodie_record_key"]
        assert keygen.partition_path(row) == row["_hoodie_partition_path"]


def _timestamp(settings: dict[str, str], hive: bool = False) -> KG.KeyGenerator:
    return build_key_generator(KG.TIMESTAMP, ["id"], "ts", settings, hive_style=hive, text_partition=True)


# Hudi's key generation guide, TimestampBasedKeyGenerator examples (input -> partition path)
GUIDE = [
    (  # "Timestamp is GMT"
        {
            KG.TIMESTAMP_TYPE: "EPOCHMILLISECONDS",
            KG.OUTPUT_FORMAT: "yyyy-MM-dd hh",
            KG.TIMEZONE: "GMT+8:00",
        },
        1578283932000,
        "2020-01-06 12",
    ),
    (  # "Timestamp is DATE_STRING"
        {
            KG.TIMESTAMP_TYPE: "DATE_STRING",
            KG.OUTPUT_FORMAT: "yyyy-MM-dd hh",
            KG.TIMEZONE: "GMT+8:00",
            KG.INPUT_FORMAT: "yyyy-MM-dd hh:mm:ss",
        },
        "2020-01-06 12:12:12",
        "2020-01-06 12",
    ),
    (  # "Scalar examples"
        {
            KG.TIMESTAMP_TYPE: "SCALAR",
            KG.OUTPUT_FORMAT: "yyyy-MM-dd hh",
            KG.TIMEZONE: "GMT",
            KG.SCALAR_UNIT: "days",
        },
        20000,
        "2024-10-04 12",
    ),
    (  # "ISO8601WithMsZ with Single Input format"
        {
            KG.TIMESTAMP_TYPE: "DATE_STRING",
            KG.INPUT_FORMAT: "yyyy-MM-dd'T'HH:mm:ss.SSSZ",
            KG.INPUT_TIMEZONE: "",
            KG.OUTPUT_FORMAT: "yyyyMMddHH",
            KG.OUTPUT_TIMEZONE: "GMT",
        },
        "2020-04-01T13:01:33.428Z",
        "2020040113",
    ),
    (  # "ISO8601WithMsZ with Multiple Input formats"
        {
            KG.TIMESTAMP_TYPE: "DATE_STRING",
            KG.INPUT_FORMAT: "yyyy-MM-dd'T'HH:mm:ssZ,yyyy-MM-dd'T'HH:mm:ss.SSSZ",
            KG.OUTPUT_FORMAT: "yyyyMMddHH",
            KG.OUTPUT_TIMEZONE: "GMT",
        },
        "2020-04-01T13:01:33.428Z",
        "2020040113",
    ),
    (  # "ISO8601NoMs with offset using multiple input formats"
        {
            KG.TIMESTAMP_TYPE: "DATE_STRING",
            KG.INPUT_FORMAT: "yyyy-MM-dd'T'HH:mm:ssZ,yyyy-MM-dd'T'HH:mm:ss.SSSZ",
            KG.OUTPUT_FORMAT: "yyyyMMddHH",
            KG.OUTPUT_TIMEZONE: "GMT",
        },
        "2020-04-01T13:01:33-05:00",
        "2020040118",
    ),
    (  # "Input as short date string and expect date in date format"
        {
            KG.TIMESTAMP_TYPE: "DATE_STRING",
            KG.INPUT_FORMAT: "yyyy-MM-dd'T'HH:mm:ssZ,yyyy-MM-dd'T'HH:mm:ss.SSSZ,yyyyMMdd",
            KG.INPUT_TIMEZONE: "UTC",
            KG.OUTPUT_FORMAT: "MM/dd/yyyy",
            KG.OUTPUT_TIMEZONE: "UTC",
        },
        "20200401",
        "04/01/2020",
    ),
]


@pytest.mark.parametrize(("settings", "value", "expected"), GUIDE)
def test_timestamp_examples_of_hudis_guide(settings: dict[str, str], value: Any, expected: str) -> None:
    assert _timestamp(settings).partition_path({"id": 1, "ts": value}) == expected


def test_timestamp_units_types_and_zones() -> None:
    out = {KG.OUTPUT_FORMAT: "yyyy/MM/dd/HH", KG.OUTPUT_TIMEZONE: "UTC"}
    # 2023-04-01T12:01:00Z is 1680350460 s (the fixture's first row, ts_str 2023-04-01T12:01:00.123Z)
    unix = _timestamp({**out, KG.TIMESTAMP_TYPE: "UNIX_TIMESTAMP"})
    assert unix.partition_path({"id": 1, "ts": 1680350460}) == "2023/04/01/12"
    assert unix.partition_path({"id": 1, "ts": 1680350460.9}) == "2023/04/01/12"  # longValue(): truncated
    assert unix.partition_path({"id": 1, "ts": decimal.Decimal("1680350460.5")}) == "2023/04/01/12"
    millis = _timestamp({**out, KG.TIMESTAMP_TYPE: "EPOCHMILLISECONDS"})
    assert millis.partition_path({"id": 1, "ts": 1680350460123}) == "2023/04/01/12"
    micros = _timestamp({**out, KG.TIMESTAMP_TYPE: "EPOCHMICROSECONDS"})
    assert micros.partition_path({"id": 1, "ts": 1680350460123456}) == "2023/04/01/12"
    # SCALAR with MILLISECONDS = EPOCHMILLISECONDS (TimeUnit conversion)
    scalar = _timestamp({**out, KG.TIMESTAMP_TYPE: "SCALAR", KG.SCALAR_UNIT: "MILLISECONDS"})
    assert scalar.partition_path({"id": 1, "ts": 1680350460123}) == "2023/04/01/12"
    # a timestamp column is its Avro long (micros) unless the consistent-timestamp setting is on
    at = datetime.datetime(2023, 4, 1, 12, 1, tzinfo=datetime.UTC)
    assert micros.partition_path({"id": 1, "ts": at}) == "2023/04/01/12"
    # output zone: Asia/Kolkata is +05:30, so 12:01Z is 17:31 there
    kolkata = _timestamp({**out, KG.TIMESTAMP_TYPE: "UNIX_TIMESTAMP", KG.OUTPUT_TIMEZONE: "Asia/Kolkata"})
    assert kolkata.partition_path({"id": 1, "ts": 1680350460}) == "2023/04/01/17"
    # DATE_STRING without an output zone: the zone parsed from the text (withOffsetParsed)
    parsed = _timestamp(
        {KG.TIMESTAMP_TYPE: "DATE_STRING", KG.INPUT_FORMAT: "yyyy-MM-dd HH:mmZZ", KG.OUTPUT_FORMAT: "yyyy-MM-dd-HH"}
    )
    assert parsed.partition_path({"id": 1, "ts": "2023-04-01 23:30+08:00"}) == "2023-04-01-23"
    # ... but an input zone overrides the offset for the result (withZone)
    in_zone = _timestamp(
        {
            KG.TIMESTAMP_TYPE: "DATE_STRING",
            KG.INPUT_FORMAT: "yyyy-MM-dd HH:mmZZ",
            KG.INPUT_TIMEZONE: "UTC",
            KG.OUTPUT_FORMAT: "yyyy-MM-dd-HH",
        }
    )
    assert in_zone.partition_path({"id": 1, "ts": "2023-04-01 23:30+08:00"}) == "2023-04-01-15"
    # hive style puts the field name in front (TimestampBasedAvroKeyGenerator.getPartitionPath)
    hive = _timestamp({**out, KG.TIMESTAMP_TYPE: "UNIX_TIMESTAMP"}, hive=True)
    assert hive.partition_path({"id": 1, "ts": 1680350460}) == "ts=2023/04/01/12"
    # text pattern letters: month and day names, 12-hour clock
    names = _timestamp({KG.TIMESTAMP_TYPE: "UNIX_TIMESTAMP", KG.OUTPUT_FORMAT: "EEE MMM d yyyy h a"})
    assert names.partition_path({"id": 1, "ts": 1680350460}) == "Sat Apr 1 2023 12 PM"


def test_timestamp_null_value_gets_hudis_default() -> None:
    # getDefaultPartitionVal: 1 (in the type's unit) for numbers, the instant 1 ms printed in the
    # first input format for text
    unix = _timestamp({KG.TIMESTAMP_TYPE: "UNIX_TIMESTAMP", KG.OUTPUT_FORMAT: "yyyy-MM-dd HH:mm:ss"})
    assert unix.partition_path({"id": 1, "ts": None}) == "1970-01-01 00:00:01"
    text = _timestamp({KG.TIMESTAMP_TYPE: "DATE_STRING", KG.INPUT_FORMAT: "yyyy-MM-dd", KG.OUTPUT_FORMAT: "yyyy/MM/dd"})
    assert text.partition_path({"id": 1, "ts": None}) == "1970/01/01"


def test_timestamp_settings_that_hudi_refuses_are_refused() -> None:
    with pytest.raises(KeyGeneratorError, match=r"timestamp\.type"):
        build_key_generator(KG.TIMESTAMP, ["id"], "ts", {KG.OUTPUT_FORMAT: "yyyy"}, text_partition=False)
    with pytest.raises(KeyGeneratorError, match=r"output\.dateformat"):
        build_key_generator(KG.TIMESTAMP, ["id"], "ts", {KG.TIMESTAMP_TYPE: "UNIX_TIMESTAMP"})
    with pytest.raises(KeyGeneratorError, match=r"input\.dateformat"):
        build_key_generator(KG.TIMESTAMP, ["id"], "ts", {KG.TIMESTAMP_TYPE: "DATE_STRING", KG.OUTPUT_FORMAT: "yyyy"})
    dates = _timestamp({KG.TIMESTAMP_TYPE: "DATE_STRING", KG.INPUT_FORMAT: "yyyy-MM-dd", KG.OUTPUT_FORMAT: "yyyy"})
    # the column and the record named: a write of many rows refuses on one
    says = r"^partition field 'ts' of the record with key '1': cannot parse '01/04/2023'"
    with pytest.raises(KeyGeneratorError, match=says):
        dates.partition_path({"id": 1, "ts": "01/04/2023"})


def test_simple_and_complex_keys_with_nulls_and_empties() -> None:
    simple = build_key_generator(KG.SIMPLE, ["id"], "p", {})
    assert simple.record_key({"id": 7, "p": None}) == "7"
    # KeyGenUtils.getPartitionPath: null or empty -> __HIVE_DEFAULT_PARTITION__
    assert simple.partition_path({"id": 7, "p": None}) == "__HIVE_DEFAULT_PARTITION__"
    assert simple.partition_path({"id": 7, "p": ""}) == "__HIVE_DEFAULT_PARTITION__"
    # KeyGenUtils.getRecordKey(record, field): null or empty is an error
    for bad in (None, ""):
        with pytest.raises(KeyGeneratorError, match="cannot be null or empty"):
            simple.record_key({"id": bad, "p": "x"})
    complex_ = build_key_generator(KG.COMPLEX, ["id", "name"], "a,b", {}, hive_style=True)
    assert complex_.record_key({"id": 1, "name": None, "a": 1, "b": 2}) == "id:1,name:__null__"
    assert complex_.record_key({"id": 1, "name": "", "a": 1, "b": 2}) == "id:1,name:__empty__"
    with pytest.raises(KeyGeneratorError, match="all null or empty"):
        complex_.record_key({"id": None, "name": "", "a": 1, "b": 2})
    assert complex_.partition_path({"id": 1, "name": "x", "a": None, "b": 2}) == "a=__HIVE_DEFAULT_PARTITION__/b=2"
    # ComplexKeyGenEncoding: one field is "field:value" (0.14.0, version 9+) or the value (0.14.1 to 1.0.2)
    prefixed = build_key_generator(KG.COMPLEX, ["id"], "a,b", {}, field_prefixed_single_key=True)
    bare = build_key_generator(KG.COMPLEX, ["id"], "a,b", {}, field_prefixed_single_key=False)
    assert prefixed.record_key({"id": 3}) == "id:3"
    assert bare.record_key({"id": 3}) == "3"
    nonpartitioned = build_key_generator(KG.NONPARTITIONED, ["id", "name"], "", {})
    assert nonpartitioned.record_key({"id": 1, "name": "a"}) == "id:1,name:a"
    assert nonpartitioned.partition_path({"id": 1, "name": "a"}) == ""


def test_values_print_as_java_prints_them() -> None:
    keygen = build_key_generator(KG.COMPLEX, ["d", "f", "dec", "day", "b"], "p", {}, float_columns=frozenset({"f"}))
    row = {
        "d": 1e7,  # Double.toString: 1.0E7
        "f": 1.1,  # a float column: Float.toString, not the double's 1.100000023841858
        "dec": decimal.Decimal("12345.67890"),  # BigDecimal.toString keeps the scale
        "day": datetime.date(2023, 4, 1),  # an Avro date: LocalDate.toString
        "b": True,
        "p": 0.001,
    }
    assert keygen.record_key(row) == "d:1.0E7,f:1.1,dec:12345.67890,day:2023-04-01,b:true"
    assert keygen.partition_path(row) == "0.001"
    # a timestamp-micros column is its long in a key, unless the consistent setting is on
    at = datetime.datetime(2023, 4, 1, 12, 1, tzinfo=datetime.UTC)
    assert build_key_generator(KG.SIMPLE, ["t"], "p", {}).record_key({"t": at, "p": 1}) == "1680350460000000"
    consistent = build_key_generator(KG.SIMPLE, ["t"], "p", {KG.CONSISTENT_TIMESTAMP: "true"})
    assert consistent.record_key({"t": at, "p": 1}) == "2023-04-01 12:01:00.0"


def test_url_encoding_escapes_what_hive_escapes() -> None:
    # PartitionPathEncodeUtils.escapePathName: '/', ':', '=', '%', ' ' is kept
    keygen = build_key_generator(KG.SIMPLE, ["id"], "p", {}, hive_style=True, url_encode=True)
    assert keygen.partition_path({"id": 1, "p": "a/b:c=d%e f"}) == "p=a%2Fb%3Ac%3Dd%25e f"


def test_custom_key_generator_combines_simple_and_timestamp_fields() -> None:
    settings = {KG.TIMESTAMP_TYPE: "EPOCHMILLISECONDS", KG.OUTPUT_FORMAT: "yyyyMMdd", KG.TIMEZONE: "UTC"}
    keygen = build_key_generator(KG.CUSTOM, ["id"], "city:simple,ts:TIMESTAMP", settings, hive_style=True)
    row = {"id": 5, "city": "sf", "ts": 1680350460123}
    assert keygen.record_key(row) == "5"  # one record key field: SimpleAvroKeyGenerator
    assert keygen.partition_path(row) == "city=sf/ts=20230401"
    two_keys = build_key_generator(KG.CUSTOM, ["id", "city"], "city:simple", {})
    assert two_keys.record_key(row) == "id:5,city:sf"
    with pytest.raises(KeyGeneratorError, match="field:SIMPLE or field:TIMESTAMP"):
        build_key_generator(KG.CUSTOM, ["id"], "city,ts", settings)


def test_a_custom_partition_field_without_its_type_is_told_both_ways_to_give_it() -> None:
    # a caller of tidemark.spark.write was told only of the CLI's --partition-field
    with pytest.raises(KeyGeneratorError) as refused:
        build_key_generator(KG.CUSTOM, ["id"], "city, ts", {})
    assert str(refused.value).endswith(
        "give --partition-field city:SIMPLE,ts:SIMPLE or similar, "
        "or hoodie.datasource.write.partitionpath.field=city:SIMPLE,ts:SIMPLE in a Hudi options dict"
    )


def test_an_unknown_key_generator_is_refused_by_name() -> None:
    with pytest.raises(KeyGeneratorError, match=r"com\.example\.MyKeyGenerator is not supported"):
        build_key_generator("com.example.MyKeyGenerator", ["id"], "p", {})
    with pytest.raises(KeyGeneratorError, match="takes one record key field"):
        build_key_generator(KG.SIMPLE, ["a", "b"], "p", {})


def test_a_partition_time_past_year_9999_is_refused_with_its_value() -> None:
    """The write failed with a bare "OverflowError: date value out of range", naming nothing."""
    keygen = KG.build_key_generator(
        KG.TIMESTAMP,
        ["id"],
        "ts",
        {
            "hoodie.keygen.timebased.timestamp.type": "EPOCHMILLISECONDS",
            "hoodie.keygen.timebased.output.dateformat": "yyyy/MM/dd",
            "hoodie.keygen.timebased.output.timezone": "Asia/Kolkata",
        },
    )
    assert keygen.partition_path({"id": "a", "ts": 253402280000000}) == "9999/12/31"
    with pytest.raises(KeyGeneratorError, match=r"253402300799000 .* outside the years 1 to 9999"):
        keygen.partition_path({"id": "a", "ts": 253402300799000})


def test_partition_paths_whose_files_would_not_be_in_a_folder_of_their_own_are_refused() -> None:
    KG.check_partition_paths(["a/b", "a/c", "", "city=..", "L" * 255, "x/.hoodie", "part=.hoodie", ".hoodie2"])
    for paths, says in (
        (["ok", ".."], r"partition path '\.\.': a folder name in it is empty, '\.' or '\.\.'"),
        (["a//b"], "a folder name in it is empty"),
        (["x", "x/y/z"], r"partition path 'x/y/z' would be a folder inside partition 'x'"),
        (["é" * 128], "a folder name of 256 bytes, longer than the 255 a file system"),
        ([".hoodie"], r"partition path '\.hoodie': its files would be in the table's timeline folder"),
        (["a", ".hoodie/archived"], "timeline folder .hoodie, where no reader looks for data; use hive-style"),
        (["a\nb"], r"the control character '\\n' in a folder name .*urlencode=true"),
        (["nul\x00"], r"the control character '\\x00'"),
    ):
        with pytest.raises(KeyGeneratorError, match=says):
            KG.check_partition_paths(paths)


def test_hive_style_is_suggested_only_where_it_would_give_a_folder_of_its_own() -> None:
    # hive-style gives a value's first folder a name of its own ('city=..', 'city=../a'), not a
    # folder further on, which may lie inside the value ('a/..', 'a//b'); and a write that is
    # hive-style already is told only to escape
    for paths, hive_style, suggested in (
        ([".."], False, True),
        (["../a"], False, True),
        (["a/.."], False, False),
        (["a//b"], False, False),
        (["p=a/"], True, False),
    ):
        with pytest.raises(KeyGeneratorError, match="urlencode=true to keep a '/' in a value") as raised:
            KG.check_partition_paths(paths, hive_style)
        assert ("use hive-style partitioning" in str(raised.value)) is suggested, (paths, str(raised.value))


# Hudi reads a time zone setting as DateTimeZone.forTimeZone(TimeZone.getTimeZone(id)); what Joda
# 2.14.1 printed under Java 17 for 2024-07-01T04:30Z (1719808200000 ms) and 2024-01-01T04:30Z
# (1704083400000 ms) in yyyy/MM/dd/HH, and for the first in "HH z ZZZ"
HUDI_ZONES = [
    ("EST", "2024/07/01/00", "2023/12/31/23", "00 EDT America/New_York"),  # not zoneinfo's fixed -05:00
    ("MST", "2024/06/30/22", "2023/12/31/21", "22 MDT America/Denver"),
    ("HST", "2024/06/30/18", "2023/12/31/18", "18 HST Pacific/Honolulu"),
    ("PST", "2024/06/30/21", "2023/12/31/20", "21 PDT America/Los_Angeles"),  # no zoneinfo key
    ("IST", "2024/07/01/10", "2024/01/01/10", "10 IST Asia/Kolkata"),
    ("JST", "2024/07/01/13", "2024/01/01/13", "13 JST Asia/Tokyo"),
    ("CST", "2024/06/30/23", "2023/12/31/22", "23 CDT America/Chicago"),
    ("CTT", "2024/07/01/12", "2024/01/01/12", "12 CST Asia/Shanghai"),
    ("AET", "2024/07/01/14", "2024/01/01/15", "14 AEST Australia/Sydney"),
    ("ECT", "2024/07/01/06", "2024/01/01/05", "06 CEST CET"),
    ("MET", "2024/07/01/06", "2024/01/01/05", "06 CEST CET"),
    # custom ids: GMT, a sign, then h, hh, hhmm or hh:mm; Joda names the zone by its offset
    ("GMT+8", "2024/07/01/12", "2024/01/01/12", "12 +08:00 +08:00"),
    ("GMT+0800", "2024/07/01/12", "2024/01/01/12", "12 +08:00 +08:00"),
    ("GMT-5:30", "2024/06/30/23", "2023/12/31/23", "23 -05:30 -05:30"),
    ("GMT+123", "2024/07/01/05", "2024/01/01/05", "05 +01:23 +01:23"),
    ("Asia/Kolkata", "2024/07/01/10", "2024/01/01/10", "10 IST Asia/Kolkata"),
    ("utc", "2024/07/01/04", "2024/01/01/04", "04 UTC UTC"),  # unknown (ids are case-sensitive): GMT
]


def _zoned(zone_id: str, output_format: str = "yyyy/MM/dd/HH", new_table: bool = False) -> KG.KeyGenerator:
    settings = {KG.TIMESTAMP_TYPE: "EPOCHMILLISECONDS", KG.OUTPUT_FORMAT: output_format, KG.TIMEZONE: zone_id}
    return build_key_generator(KG.TIMESTAMP, ["id"], "ts", settings, new_table=new_table)


@pytest.mark.parametrize(("zone_id", "july", "january", "names"), HUDI_ZONES, ids=[z[0] for z in HUDI_ZONES])
def test_time_zone_ids_give_the_partition_paths_hudi_gives(zone_id: str, july: str, january: str, names: str) -> None:
    """EST and MST were fixed offsets, PST, IST, JST, ... UTC: records landed in other partitions
    than Hudi's, and an upsert to an Apache-written table duplicated keys instead of updating."""
    keygen = _zoned(zone_id, new_table=True)
    assert keygen.partition_path({"id": 1, "ts": 1719808200000}) == july
    assert keygen.partition_path({"id": 1, "ts": 1704083400000}) == january
    assert _zoned(zone_id, "HH z ZZZ").partition_path({"id": 1, "ts": 1719808200000}) == names
    # the input time zone too: a local time in EST is New York's (EDT, -4 in July) in Hudi
    text = build_key_generator(
        KG.TIMESTAMP,
        ["id"],
        "ts",
        {
            KG.TIMESTAMP_TYPE: "DATE_STRING",
            KG.INPUT_FORMAT: "yyyy-MM-dd HH:mm:ss",
            KG.INPUT_TIMEZONE: "EST",
            KG.OUTPUT_TIMEZONE: "UTC",
            KG.OUTPUT_FORMAT: "yyyy/MM/dd/HH",
        },
    )
    assert text.partition_path({"id": 1, "ts": "2024-07-01 02:00:00"}) == "2024/07/01/06"  # Joda: 06


# ids java.util.TimeZone does not know, which it reads as GMT (Joda printed 2024/07/01/04 for each)
NOT_JAVA_IDS = ["UTC+8", "+08:00", "UTC+08:00", "GMT+24:00", "GMT+08:00:00", "Asia/kolkata", "ROC"]
#: those of them earlier tidemark versions read as an offset
READ_AS_OFFSET_BEFORE = ["UTC+8", "+08:00", "UTC+08:00", "GMT+24:00", "GMT+08:00:00"]


@pytest.mark.parametrize("zone_id", NOT_JAVA_IDS)
def test_a_time_zone_id_java_reads_as_gmt(zone_id: str, caplog: pytest.LogCaptureFixture) -> None:
    # a new table is refused before anything is written, naming the setting
    says = (
        rf"^hoodie\.keygen\.timebased\.timezone={re.escape(zone_id)}: java\.util\.TimeZone does not know .*GMT\+08:00"
    )
    with pytest.raises(KeyGeneratorError, match=says):
        _zoned(zone_id, new_table=True)
    if zone_id in READ_AS_OFFSET_BEFORE:
        # an existing table's paths follow GMT (Apache wrote it) or the offset (an earlier
        # tidemark did): no guess, nothing written, and the way out said
        with pytest.raises(
            KeyGeneratorError, match=r"earlier tidemark versions read it as an offset.*hoodie\.properties"
        ):
            _zoned(zone_id)
        return
    # an existing table's paths were computed in GMT by Apache Hudi: its
    # writes follow them, with a warning
    with caplog.at_level("WARNING", "tidemark.write"):
        keygen = _zoned(zone_id)
    assert keygen.partition_path({"id": 1, "ts": 1719808200000}) == "2024/07/01/04"
    assert f"hoodie.keygen.timebased.timezone={zone_id}: java.util.TimeZone does not know" in caplog.text


def test_time_zone_settings_hudi_cannot_write_with_are_refused() -> None:
    old_name = {
        KG.TIMESTAMP_TYPE: "EPOCHMILLISECONDS",
        KG.OUTPUT_FORMAT: "yyyy",
        "hoodie.deltastreamer.keygen.timebased.output.timezone": "UTC+8",
    }
    with pytest.raises(KeyGeneratorError, match=r"^hoodie\.deltastreamer\.keygen\.timebased\.output\.timezone=UTC\+8"):
        build_key_generator(KG.TIMESTAMP, ["id"], "ts", old_name, new_table=True)
    # Java 17 knows SystemV/EST5, Joda does not: Hudi's write fails
    with pytest.raises(
        KeyGeneratorError, match=r"^hoodie\.keygen\.timebased\.timezone=SystemV/EST5: Hudi's writer fails"
    ):
        _zoned("SystemV/EST5")
    # a local time in a daylight saving gap: Joda throws IllegalInstantException
    gap = build_key_generator(
        KG.TIMESTAMP,
        ["id"],
        "ts",
        {
            KG.TIMESTAMP_TYPE: "DATE_STRING",
            KG.INPUT_FORMAT: "yyyy-MM-dd HH:mm:ss",
            KG.INPUT_TIMEZONE: "America/New_York",
            KG.OUTPUT_TIMEZONE: "UTC",
            KG.OUTPUT_FORMAT: "yyyy/MM/dd/HH",
        },
    )
    with pytest.raises(KeyGeneratorError, match=r"'2024-03-10 02:30:00' is a local time that does not exist"):
        gap.partition_path({"id": 1, "ts": "2024-03-10 02:30:00"})
    assert gap.partition_path({"id": 1, "ts": "2024-11-03 01:30:00"}) == "2024/11/03/05"  # overlap: Joda's 05


def test_an_offset_in_the_text_prints_as_joda_prints_it() -> None:
    parsed = _timestamp(
        {
            KG.TIMESTAMP_TYPE: "DATE_STRING",
            KG.INPUT_FORMAT: "yyyy-MM-dd'T'HH:mm:ss.SSSZ",
            KG.OUTPUT_FORMAT: "yyyy-MM-dd HH z",
        }
    )
    # Joda: "2024-07-01 04 +05:30" (was "UTC+05:30")
    assert parsed.partition_path({"id": 1, "ts": "2024-07-01T04:30:00.000+0530"}) == "2024-07-01 04 +05:30"


def test_consistent_timestamps_are_javas_timestamp_of_the_milliseconds() -> None:
    """HoodieAvroUtils.convertValueForAvroLogicalTypes: new Timestamp(micros / 1000), so Hudi's
    keys end at the millisecond (Java's / rounds toward zero before 1970); the microseconds
    tidemark printed were keys Hudi never wrote, and an upsert added each record a second time."""
    consistent = {KG.CONSISTENT_TIMESTAMP: "true"}
    simple = build_key_generator(KG.SIMPLE, ["t"], "t", consistent)
    at = datetime.datetime(2023, 4, 1, 12, 1, 0, 123456, tzinfo=datetime.UTC)
    assert simple.record_key({"t": at}) == "2023-04-01 12:01:00.123"
    assert simple.partition_path({"t": at}) == "2023-04-01 12:01:00.123"
    before_1970 = datetime.datetime(1969, 12, 31, 23, 59, 59, 998500, tzinfo=datetime.UTC)  # -1500 µs
    assert simple.record_key({"t": before_1970}) == "1969-12-31 23:59:59.999"
    assert simple.record_key({"t": datetime.datetime(2023, 4, 1, 12, 1, 0, 999, tzinfo=datetime.UTC)}) == (
        "2023-04-01 12:01:00.0"
    )
    # TimestampBasedAvroKeyGenerator: Timestamp.getTime(), the same milliseconds
    timestamp = build_key_generator(
        KG.TIMESTAMP,
        ["id"],
        "t",
        {**consistent, KG.TIMESTAMP_TYPE: "EPOCHMILLISECONDS", KG.OUTPUT_FORMAT: "yyyy-MM-dd HH:mm:ss.SSS"},
    )
    assert timestamp.partition_path({"id": 1, "t": before_1970}) == "1969-12-31 23:59:59.999"


def test_a_double_that_is_no_number_partitions_as_hudis_long_value() -> None:
    """Double.longValue(): NaN is 0, so Hudi puts the record in 1970/01/01; infinity is the
    largest long, past the years tidemark prints: refused naming the column and the record (it
    was a bare ValueError naming neither)."""
    keygen = build_key_generator(
        KG.TIMESTAMP, ["id"], "ts", {KG.TIMESTAMP_TYPE: "UNIX_TIMESTAMP", KG.OUTPUT_FORMAT: "yyyy/MM/dd"}
    )
    assert keygen.partition_path({"id": "a", "ts": float("nan")}) == "1970/01/01"
    assert keygen.partition_path({"id": "a", "ts": -0.9}) == "1970/01/01"  # toward zero: 0 s
    for infinite in (float("inf"), float("-inf")):
        says = r"^partition field 'ts' of the record with key 'a': the timestamp -?inf .* outside the years 1 to 9999"
        with pytest.raises(KeyGeneratorError, match=says):
            keygen.partition_path({"id": "a", "ts": infinite})


def test_url_encoding_escapes_nul_as_hudi_does() -> None:
    """PartitionPathEncodeUtils escapes 0x00 to 0x1F; a NUL was kept, and the path refused with
    advice to turn on the URL-encoding that was on."""
    keygen = build_key_generator(KG.SIMPLE, ["id"], "p", {}, url_encode=True)
    path = keygen.partition_path({"id": 1, "p": "a\x00b\x1fc"})
    assert path == "a%00b%1Fc"
    KG.check_partition_paths([path])
