"""``tidemark.spark.write(df, path, **hudi_options)``: a Hudi quickstart's options dict, unchanged,
writes a table Apache's reader reads; options tidemark does not use are warned about by name, and
contradictory or foreign ones are refused before anything is written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import tidemark.spark
from tests.support.kafka import TansuBroker
from tests.support.model import apache_snapshot
from tests.support.services import CoordinatorProcess, create_topics, unique_topics
from tidemark.errors import TableError
from tidemark.spark.hudi_options import IgnoredHudiOptionWarning, write_options
from tidemark.storage import LocalStorage
from tidemark.table.properties import read_properties
from tidemark.table.snapshot import read_snapshot

pytestmark = pytest.mark.spark

TABLE = "trips_table"
#: Apache Hudi 0.15's Spark quickstart (Python), word for word
QUICKSTART = {
    "hoodie.table.name": TABLE,
    "hoodie.datasource.write.recordkey.field": "uuid",
    "hoodie.datasource.write.partitionpath.field": "city",
    "hoodie.datasource.write.table.name": TABLE,
    "hoodie.datasource.write.operation": "upsert",
    "hoodie.datasource.write.precombine.field": "ts",
    "hoodie.upsert.shuffle.parallelism": 2,
    "hoodie.insert.shuffle.parallelism": 2,
}
COLUMNS = ["ts", "uuid", "rider", "driver", "fare", "city"]
TRIPS = [
    (1695159649087, "334e26e9-8355-45cc-97c6-c31daf0df330", "rider-A", "driver-K", 19.10, "san_francisco"),
    (1695091554788, "e96c4396-3fad-413a-a942-4cb36106d721", "rider-C", "driver-M", 27.70, "san_francisco"),
    (1695046462179, "9909a8b1-2d15-4d3d-8ec9-efc48c536a00", "rider-D", "driver-L", 33.90, "san_francisco"),
    (1695516137016, "e3cf430c-889d-4015-bc98-59bdce1e530c", "rider-F", "driver-P", 34.15, "sao_paulo"),
    (1695115999911, "c8abbe79-8d89-47ea-b4ce-4d224bae5bfa", "rider-J", "driver-T", 17.85, "chennai"),
]


def fares(table: Any) -> dict[str, float]:
    return dict(zip(table.column("uuid").to_pylist(), table.column("fare").to_pylist(), strict=True))


def test_the_quickstart_options_write_a_table_apache_reads(spark: Any, tmp_path: Path) -> None:
    path = str(tmp_path / TABLE)
    with pytest.warns(IgnoredHudiOptionWarning, match="hoodie.insert.shuffle.parallelism, hoodie.upsert.shuffle"):
        tidemark.spark.write(spark.createDataFrame(TRIPS, COLUMNS), path, **QUICKSTART)
    props = read_properties(LocalStorage(path))
    assert (props.name, props.record_key_fields, props.precombine_field) == (TABLE, ("uuid",), "ts")
    assert props.partition_fields == ("city",)
    want = {t[1]: t[4] for t in TRIPS}
    assert fares(apache_snapshot(path)) == want

    # the quickstart's update: rider-D's fare doubled, with the same options
    updated = [(t[0] + 1, *t[1:4], t[4] * 10, t[5]) for t in TRIPS if t[2] == "rider-D"]
    with pytest.warns(IgnoredHudiOptionWarning):
        tidemark.spark.write(spark.createDataFrame(updated, COLUMNS), path, **QUICKSTART)
    want[updated[0][1]] = updated[0][4]
    assert fares(apache_snapshot(path)) == want == fares(read_snapshot(LocalStorage(path)))

    # and its delete: the operation changed, nothing else
    gone = [t for t in TRIPS if t[2] == "rider-F"]
    with pytest.warns(IgnoredHudiOptionWarning):
        tidemark.spark.write(
            spark.createDataFrame(gone, COLUMNS), path, **{**QUICKSTART, "hoodie.datasource.write.operation": "delete"}
        )
    del want[gone[0][1]]
    assert fares(apache_snapshot(path)) == want


def test_a_precombine_field_named_for_a_table_that_records_none_orders_the_writes_input(
    spark: Any, tmp_path: Path
) -> None:
    """Hudi objects to a write's precombine field only when the table records another: the write
    was refused ("precombine field ts (table: (none))")."""
    path = str(tmp_path / TABLE)
    shape = {k: v for k, v in QUICKSTART.items() if "precombine" not in k and "parallelism" not in k}
    tidemark.spark.write(spark.createDataFrame(TRIPS, COLUMNS), path, **shape)
    # one key twice, its later ts first: ordered by ts, not by arrival
    first = TRIPS[0]
    twice = [(first[0] + 2, *first[1:4], 50.0, first[5]), (first[0] + 1, *first[1:4], 40.0, first[5])]
    tidemark.spark.write(
        spark.createDataFrame(twice, COLUMNS), path, **{**shape, "hoodie.datasource.write.precombine.field": "ts"}
    )
    want = {**{t[1]: t[4] for t in TRIPS}, first[1]: 50.0}
    assert fares(read_snapshot(LocalStorage(path))) == want == fares(apache_snapshot(path))
    assert read_properties(LocalStorage(path)).precombine_field is None  # the table's own setting is unchanged


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"hoodie.datasource.write.table.type": "MERGE_ON_READ", "hoodie.table.type": "COPY_ON_WRITE"},
            "contradictory",
        ),
        (
            {"hoodie.table.name": "other"},
            "hoodie.table.name='other' but hoodie.datasource.write.table.name='trips_table'",
        ),
        ({"hoodie.datasource.write.operation": "delete_partition"}, "not supported by tidemark"),
        ({"hoodie.datasource.write.operation": "upsertt"}, "unknown operation"),
        (
            {
                "hoodie.datasource.write.keygenerator.class": "org.apache.hudi.keygen.SimpleKeyGenerator",
                "hoodie.table.keygenerator.class": "org.apache.hudi.keygen.NonpartitionedKeyGenerator",
            },
            "hoodie.datasource.write.keygenerator.class='org.apache.hudi.keygen.SimpleKeyGenerator' but",
        ),
    ],
)
@pytest.mark.filterwarnings("ignore::tidemark.spark.hudi_options.IgnoredHudiOptionWarning")
def test_contradictory_or_foreign_options_are_refused(change: dict[str, str], message: str) -> None:
    with pytest.raises(TableError, match=message.replace("(", r"\(")):
        write_options({**QUICKSTART, **change})


def test_two_names_of_one_setting_written_differently_agree() -> None:
    options = write_options(
        {
            **QUICKSTART,
            "hoodie.datasource.write.partitionpath.field": "city, day",
            "hoodie.table.partition.fields": "city,day",
            "hoodie.datasource.write.keygenerator.class": "org.apache.hudi.keygen.ComplexKeyGenerator",
            "hoodie.table.keygenerator.class": "ComplexKeyGenerator",
        }
    )
    assert options.partition_fields == ("city", "day")


@pytest.mark.parametrize(
    ("table_type", "write_table_type", "expected"),
    [
        ("mor", "MERGE_ON_READ", "MERGE_ON_READ"),
        ("merge_on_read", "MERGE_ON_READ", "MERGE_ON_READ"),
        ("COW", "COPY_ON_WRITE", "COPY_ON_WRITE"),
        ("copy_on_write", "cow", "COPY_ON_WRITE"),
    ],
)
def test_two_spellings_of_one_table_type_agree(table_type: str, write_table_type: str, expected: str) -> None:
    # each spelling alone was accepted, both together refused as contradictory
    from tidemark.table.write_client import TableSettings

    options = write_options(
        {**QUICKSTART, "hoodie.table.type": table_type, "hoodie.datasource.write.table.type": write_table_type}
    )
    assert TableSettings.from_conf(options.conf, table_type=options.table_type).table_type == expected


def test_options_that_restate_the_shape_are_read_as_flags() -> None:
    options = write_options(
        {
            "hoodie.table.name": "t",
            "hoodie.datasource.write.recordkey.field": "a,b",
            "hoodie.datasource.write.hive_style_partitioning": True,
            "hoodie.datasource.write.table.type": "COPY_ON_WRITE",
            "hoodie.datasource.write.operation": "bulk_insert",
        }
    )
    assert options.record_key == ("a", "b")
    assert options.hive_style is True
    assert options.table_type == "COPY_ON_WRITE"
    assert options.operation == "bulk_insert"
    assert options.partition_fields is None  # the table's, or none for a new one
    assert options.conf["hoodie.datasource.write.hive_style_partitioning"] == "true"


def test_the_write_settings_tidemark_reads_pass_without_a_warning() -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", IgnoredHudiOptionWarning)
        options = write_options(
            {
                "hoodie.table.name": "t",
                "hoodie.datasource.write.recordkey.field": "id",
                "hoodie.combine.before.insert": "true",
                "hoodie.logfile.data.block.format": "parquet",
                "hoodie.parquet.compression.codec": "zstd",
                "hoodie.parquet.bloom.filter.enabled": "false",
                "hoodie.parquet.small.file.limit": "0",
                "hoodie.parquet.block.size": "134217728",
                "hoodie.parquet.page.size": "1048576",
                "hoodie.parquet.dictionary.enabled": "false",
            }
        )
    assert options.conf["hoodie.combine.before.insert"] == "true"
    assert options.conf["hoodie.logfile.data.block.format"] == "parquet"


def test_parquet_settings_tidemark_does_not_apply_are_warned_about() -> None:
    # Spark's row writer settings: a user setting them is told they are not applied
    with pytest.warns(
        IgnoredHudiOptionWarning, match="hoodie.parquet.outputtimestamptype, hoodie.parquet.writelegacyformat.enabled"
    ):
        write_options(
            {
                "hoodie.table.name": "t",
                "hoodie.parquet.outputtimestamptype": "TIMESTAMP_MILLIS",
                "hoodie.parquet.writelegacyformat.enabled": "true",
                "hoodie.parquet.compression.codec": "gzip",
            }
        )


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ({"hoodie.index.type": "GLOBAL_BLOOM"}, "hoodie.index.type=GLOBAL_BLOOM (tidemark's index finds a key within"),
        ({"hoodie.index.type": "BUCKET"}, "hoodie.index.type=BUCKET"),
        ({"hoodie.datasource.write.insert.drop.duplicates": True}, "insert.drop.duplicates=true (not applied"),
        ({"hoodie.datasource.write.drop.partition.columns": "true"}, "drop.partition.columns=true"),
        ({"hoodie.table.cdc.enabled": "true"}, "hoodie.table.cdc.enabled=true"),
    ],
)
def test_options_that_change_which_rows_the_table_holds_are_refused(
    spark: Any, tmp_path: Path, option: dict[str, object], message: str
) -> None:
    # written without them, keys would be doubled or misplaced unseen (an insert's duplicates
    # kept, a key moved to another partition kept twice)
    df = spark.createDataFrame(TRIPS, COLUMNS)
    with pytest.raises(
        TableError, match=r"not supported, refused before anything is written: .*" + message.replace("(", r"\(")
    ):
        tidemark.spark.write(df, str(tmp_path / "t"), **{**QUICKSTART, **option})
    assert not (tmp_path / "t").exists()


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ({"hoodie.datasource.insert.dup.policy": "drop"}, "hoodie.datasource.insert.dup.policy=drop (not applied"),
        ({"hoodie.datasource.insert.dup.policy": "FAIL"}, "hoodie.datasource.insert.dup.policy=FAIL (not applied"),
        ({"hoodie.combine.before.upsert": False}, "hoodie.combine.before.upsert=false (tidemark's upsert always"),
        (
            {"hoodie.merge.allow.duplicate.on.inserts": "true"},
            "hoodie.merge.allow.duplicate.on.inserts=true (tidemark's copy-on-write insert merges",
        ),
    ],
)
def test_settings_of_which_duplicate_keys_a_write_keeps_are_refused(option: dict[str, object], message: str) -> None:
    # they were only warned about as ignored, and the write went ahead without them
    from tidemark.spark.write_job import check_write_settings

    options = write_options({**QUICKSTART, "hoodie.datasource.write.operation": "insert", **option})
    with pytest.raises(
        TableError, match=r"not supported, refused before anything is written: " + message.replace("(", r"\(")
    ):
        check_write_settings(options)


def test_settings_of_which_duplicate_keys_a_write_keeps_may_restate_the_default() -> None:
    import warnings

    from tidemark.spark.write_job import check_write_settings

    defaults = {
        "hoodie.datasource.insert.dup.policy": "none",
        "hoodie.combine.before.upsert": True,
        "hoodie.merge.allow.duplicate.on.inserts": "false",
    }
    with warnings.catch_warnings():
        warnings.simplefilter("error", IgnoredHudiOptionWarning)
        options = write_options({"hoodie.table.name": "t", "hoodie.datasource.write.recordkey.field": "id", **defaults})
    check_write_settings(options)


def test_a_misspelt_key_of_a_family_tidemark_reads_is_warned_about() -> None:
    # it fell back to its default unseen: the table was created MERGE_ON_READ
    with pytest.warns(IgnoredHudiOptionWarning, match="hoodie.datasource.write.table.tpye"):
        options = write_options({**QUICKSTART, "hoodie.datasource.write.table.tpye": "COPY_ON_WRITE"})
    assert options.table_type is None


def test_a_key_that_only_begins_with_a_key_tidemark_reads_is_warned_about() -> None:
    # "operationX" is not "operation": the operation stays Hudi's default and the user is told
    with pytest.warns(IgnoredHudiOptionWarning, match=r"hoodie\.datasource\.write\.operationX"):
        options = write_options({**QUICKSTART, "hoodie.datasource.write.operationX": "delete"})
    assert options.operation == "upsert"


def test_an_option_set_to_none_is_refused_not_taken_as_the_text_none() -> None:
    """None was written as "None": a precombine field named "None", which the input lacked."""
    with pytest.raises(TableError, match=r"without a value \(None\): hoodie\.datasource\.write\.precombine\.field"):
        write_options({**QUICKSTART, "hoodie.datasource.write.precombine.field": None})


def test_the_options_dict_writes_through_the_writer_coordinator(
    spark: Any, tmp_path: Path, kafka_broker: TansuBroker
) -> None:
    """hoodie.write.markers.type=TIMELINE_SERVER_BASED asked for tidemark.writer.coordinator.url,
    which the dict then refused as not Hudi's: a Hudi options dict could not reach the coordinator.
    Its tidemark.* keys now reach the write's settings as --conf's do; a misspelt one is still
    refused, and a key neither Hudi's nor tidemark's still is too."""
    path = str(tmp_path / TABLE)
    topic, dead = unique_topics("hudi-options")
    create_topics(kafka_broker.bootstrap, [topic, dead])
    with CoordinatorProcess(kafka_broker.bootstrap, topic, dead) as coordinator:
        coordinator.start()
        coordinator.wait_ready()
        options = {**QUICKSTART, **coordinator.writer_conf}
        misspelt = {**options, "tidemark.writer.coordinator.token.fle": "x"}
        with pytest.raises(
            TableError, match=r"unknown writer-coordinator setting\(s\) tidemark.writer.coordinator.token.fle"
        ):
            tidemark.spark.write(spark.createDataFrame(TRIPS, COLUMNS), path, **misspelt)
        assert not Path(path).exists()
        with pytest.warns(IgnoredHudiOptionWarning) as warned:
            tidemark.spark.write(spark.createDataFrame(TRIPS, COLUMNS), path, **options)
        assert "tidemark." not in " ".join(str(w.message) for w in warned)  # only the shuffle parallelisms
        # its markers went to the coordinator, which wrote them as Hudi's MARKERS files
        assert coordinator.metric("tidemark_coordinator_markers_created_total", table=path) == 3
    assert fares(apache_snapshot(path)) == {t[1]: t[4] for t in TRIPS}


@pytest.mark.parametrize("key", ["spark.sql.shuffle.partitions", "path"])
def test_keys_neither_hudis_nor_tidemarks_are_refused(key: str) -> None:
    with pytest.raises(
        TableError,
        match=rf"not Hudi or tidemark options: {key} \(tidemark.spark.write takes hoodie\.\* and tidemark\.\* keys\)",
    ):
        write_options({**QUICKSTART, key: "1"})
