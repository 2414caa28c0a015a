"""Tables written from PySpark: after every operation, tidemark's snapshot, Apache's reader
(the ``hudi`` package) and the test's own model hold the same rows."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from tests.support.model import TableModel, apache_snapshot, data_rows, hudi_s3_options
from tests.support.services import events_of, read_topics
from tests.support.spark import ansi_off
from tests.support.table_builder import PARTITION, TableBuilder, _table
from tidemark.errors import InstantStateError
from tidemark.spark.write_job import _BUCKET, _KIND, _KINDS, WriteHooks, _TaskPlan, _write_partition
from tidemark.storage import LocalStorage, S3Options, Storage, open_storage
from tidemark.table.avro_schema import latest_table_schema
from tidemark.table.concurrency import ConcurrencyConfig
from tidemark.table.file_system_view import FileSystemView, instant_metadata
from tidemark.table.snapshot import SnapshotReader, read_snapshot
from tidemark.table.write_client import PendingWrite, begin_write, rollback_pending_writes
from tidemark.table.write_handles import BeforeAppend
from tidemark.timeline import COMMIT, WriteStat, load_timeline

pytestmark = pytest.mark.spark

CITIES = ["san_francisco", "sao_paulo", "chennai"]


def trips(keys: range | list[int], ts: int, fare_base: float = 0.0) -> list[dict[str, Any]]:
    return [
        {"uuid": f"id-{k:04d}", "ts": ts, "rider": f"rider-{k}", "fare": float(fare_base + k), "city": CITIES[k % 3]}
        for k in keys
    ]


def hudi_options(extra: dict[str, str]) -> dict[str, str]:
    """A Hudi quickstart options dict for table ``t`` keyed by ``id`` and ordered by ``ts``, with
    ``extra`` on top."""
    return {
        "hoodie.table.name": "t",
        "hoodie.datasource.write.recordkey.field": "id",
        "hoodie.datasource.write.precombine.field": "ts",
        **extra,
    }


class Harness:
    def __init__(
        self,
        spark: Any,
        location: str,
        partition: str | None,
        hive: bool,
        s3: S3Options | None = None,
        conf: dict[str, str] | None = None,
    ):
        from tidemark.spark.write_job import WriteOptions

        self.spark = spark
        self.location = location
        self.s3 = s3
        self.partition = partition
        self.model = TableModel("uuid", "ts", partition)
        self.options = lambda op: WriteOptions(
            op, ("uuid",), "ts", (partition,) if partition else (), hive, conf=conf or {}
        )

    @property
    def storage(self) -> Storage:
        return open_storage(self.location, self.s3)

    def write(self, op: str, rows: list[dict[str, Any]], **kw: Any) -> Any:
        from tidemark.spark.write_job import write_dataframe

        result = write_dataframe(self.spark.createDataFrame(rows), self.location, self.options(op), self.s3)
        getattr(self.model, op if op != "bulk_insert" else "insert")(rows)
        return result

    def check(self) -> None:
        expected = self.model.sorted_rows()
        ours = data_rows(read_snapshot(self.storage), "uuid", self.partition)
        assert ours == expected
        options = hudi_s3_options(self.s3.endpoint_url) if self.s3 and self.s3.endpoint_url else None
        theirs = data_rows(apache_snapshot(self.location, options), "uuid", self.partition)
        assert theirs == expected


@pytest.mark.parametrize(("partition", "hive"), [("city", True), ("city", False), (None, False)])
def test_every_operation_readable_by_both_readers(
    spark: Any, tmp_path: Path, partition: str | None, hive: bool
) -> None:
    h = Harness(spark, str(tmp_path / "trips"), partition, hive)
    h.write("insert", trips(range(30), ts=1))
    h.check()
    # updates, new keys, and out-of-order updates that must lose to the newer values
    h.write("upsert", trips(range(10), ts=3, fare_base=100) + trips(range(30, 35), ts=1))
    h.write("upsert", trips(range(5), ts=2, fare_base=900))
    h.check()
    # one key three times in one input: the largest precombine value wins, wherever it stands
    h.write("upsert", trips([7], ts=5, fare_base=1) + trips([7], ts=8, fare_base=2) + trips([7], ts=6, fare_base=3))
    h.check()
    h.write("delete", trips([1, 2, 31, 999], ts=9))
    h.check()

    from tidemark.table.compaction import compact

    before = data_rows(read_snapshot(h.storage), "uuid", partition)
    done = compact(h.storage)
    assert done is not None
    assert data_rows(read_snapshot(h.storage), "uuid", partition) == before
    h.check()
    h.write("upsert", trips([3, 4, 40], ts=5, fare_base=500))
    h.check()

    view = FileSystemView(h.storage, load_timeline(h.storage))
    chennai = next(p for p in view.partitions if "chennai" in p) if partition else ""
    groups = tuple(g.file_id for g in view.file_groups(chennai))
    overwrite = h.write("insert_overwrite", trips([50, 53, 56], ts=7))  # all in chennai (k % 3 == 2)
    h.check()
    assert dict(overwrite.replaced_file_groups) == {chennai: groups}  # the result says what it replaced
    h.write("bulk_insert", trips(range(60, 64), ts=1))
    h.check()
    actions = [i.action for i in load_timeline(h.storage).completed()]
    assert actions.count("deltacommit") == 7
    assert actions.count("compaction") == 1
    assert actions.count("replacecommit") == 1


def _join_strategies(spark: Any) -> list[str]:
    """The join operators of the SQL executions Spark ran so far (as its UI lists them)."""
    found = []
    executions = spark._jsparkSession.sharedState().statusStore().executionsList()
    for i in range(executions.size()):
        plan = executions.apply(i).physicalPlanDescription()
        found += [j for j in ("BroadcastHashJoin", "SortMergeJoin", "ShuffledHashJoin") if j in plan]
    return found


def test_an_index_above_the_broadcast_limit_is_joined_by_a_shuffle(spark: Any, tmp_path: Path) -> None:
    # the limit at one key: every write's index is "large"
    h = Harness(spark, str(tmp_path / "t"), "city", True, conf={"tidemark.index.broadcast.max.keys": "1"})
    h.write("insert", trips(range(40), ts=1))
    before = len(_join_strategies(spark))
    h.write("upsert", trips(range(0, 40, 3), ts=2, fare_base=100) + trips(range(40, 45), ts=2))
    h.write("delete", trips([1, 2, 44, 999], ts=3))
    joins = _join_strategies(spark)[before:]
    h.check()
    assert "SortMergeJoin" in joins
    assert "BroadcastHashJoin" not in joins
    # under the limit, the index is broadcast (no shuffle of the input)
    small = Harness(spark, str(tmp_path / "small"), "city", True)
    small.write("insert", trips(range(10), ts=1))
    before = len(_join_strategies(spark))
    small.write("upsert", trips(range(5), ts=2, fare_base=7))
    assert "BroadcastHashJoin" in _join_strategies(spark)[before:]
    small.check()


def test_parquet_log_blocks_are_read_by_both_readers(spark: Any, tmp_path: Path) -> None:
    from tidemark.logformat import BlockType, read_blocks

    h = Harness(spark, str(tmp_path / "t"), "city", True, conf={"hoodie.logfile.data.block.format": "parquet"})
    h.write("insert", trips(range(30), ts=1))
    h.write("upsert", trips(range(0, 30, 2), ts=2, fare_base=100) + trips(range(30, 33), ts=2))
    h.write("delete", trips([1, 3, 999], ts=3))
    h.write("upsert", trips([4, 6], ts=1, fare_base=900))  # older than the logged versions: loses
    h.check()
    kinds = set()
    for log in (tmp_path / "t").rglob("*.log.*"):
        with open_storage(str(log.parent)).open_input(log.name) as source:
            kinds |= {b.block_type for b in read_blocks(source)}
    assert kinds == {BlockType.PARQUET_DATA_BLOCK, BlockType.DELETE_BLOCK}
    from tidemark.table.compaction import compact

    assert compact(h.storage) is not None
    h.check()


def test_an_unknown_log_block_format_is_refused_before_anything_is_written(spark: Any, tmp_path: Path) -> None:
    from tidemark.errors import TableError

    h = Harness(spark, str(tmp_path / "t"), "city", True, conf={"hoodie.logfile.data.block.format": "hfile"})
    with pytest.raises(TableError, match=r"hoodie.logfile.data.block.format='hfile'.*avro or parquet"):
        h.write("insert", trips(range(3), ts=1))
    assert not (tmp_path / "t").exists()


def test_time_travel(spark: Any, tmp_path: Path) -> None:
    h = Harness(spark, str(tmp_path / "t"), "city", True)
    first = h.write("upsert", trips(range(6), ts=1))
    snapshot_one = h.model.sorted_rows()
    h.write("upsert", trips(range(3), ts=2, fare_base=50))
    old = data_rows(read_snapshot(h.storage, as_of=first.instant), "uuid", "city")
    assert old == snapshot_one
    h.check()
    from tidemark.spark.read import read_dataframe

    frame = read_dataframe(spark, h.location)
    got = sorted((r["uuid"], r["fare"]) for r in frame.select("uuid", "fare").collect())
    assert got == sorted((r["uuid"], r["fare"]) for r in h.model.sorted_rows())
    past = read_dataframe(spark, h.location, as_of=first.instant)
    assert past.count() == len(snapshot_one)


@pytest.mark.s3
def test_on_s3(spark: Any, s3_location: tuple[str, S3Options]) -> None:
    location, options = s3_location
    h = Harness(spark, location, "city", True, options)
    h.write("upsert", trips(range(12), ts=1))
    h.write("upsert", trips(range(4), ts=2, fare_base=10))
    h.write("delete", trips([5], ts=3))
    h.check()
    from tidemark.table.compaction import compact

    assert compact(h.storage) is not None
    h.check()
    # the Spark reader's executors reach the table on S3 with the options the driver was given
    from tidemark.spark.read import read_dataframe

    frame = read_dataframe(spark, location, s3=options)
    assert sorted(frame.select("uuid", "fare").collect()) == sorted(
        (r["uuid"], r["fare"]) for r in h.model.sorted_rows()
    )


@pytest.mark.kafka
def test_a_committed_write_publishes_instant_completed(
    spark: Any, tmp_path: Path, kafka_broker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The event names the table by its absolute path, though the write was given a relative one:
    a service in another working directory could not find it, or found another table."""
    import uuid

    from tidemark.events import EventType
    from tidemark.kafka_adapter import ensure_topics
    from tidemark.spark.write_job import WriteOptions, write_dataframe

    topic = f"writes-{uuid.uuid4().hex[:8]}"
    ensure_topics(kafka_broker.bootstrap, [topic])
    conf = {"tidemark.events.bootstrap": kafka_broker.bootstrap, "tidemark.events.topic": topic}
    location = str(tmp_path / "t")
    options = WriteOptions("upsert", ("uuid",), "ts", ("city",), True, conf=conf)
    monkeypatch.chdir(tmp_path)
    result = write_dataframe(spark.createDataFrame(trips(range(3), ts=1)), "t", options)
    assert read_snapshot(open_storage(location)).num_rows == 3
    events = events_of(read_topics(kafka_broker.bootstrap, [topic], until=bool, seconds=20))
    assert [(e.type, e.table, e.instant, e.action) for e in events] == [
        (EventType.INSTANT_COMPLETED, location, result.instant, "deltacommit")
    ]


def test_the_index_holds_only_keys_inside_the_inputs_range(spark: Any, tmp_path: Path) -> None:
    """The index tasks leave out the table's keys outside the input's smallest and largest key
    of their partition: an upsert whose keys sit at both ends of that range (and past the
    table's largest key) still finds every existing record, and the index it joins with holds
    only the keys inside the range."""
    from tidemark.spark.write_job import _index_frame, _index_slices, _IndexPlan
    from tidemark.table.properties import read_properties

    h = Harness(spark, str(tmp_path / "t"), "city", True)
    h.write("insert", trips(range(0, 300), ts=1))
    # per city the input's range runs from its smallest key here to a new one past the table's
    upsert = trips(range(240, 330), ts=2, fare_base=1000)
    h.write("upsert", upsert)
    h.check()  # no key became a duplicate: each update found its file group
    storage = h.storage
    ranges = {}
    for row in upsert:
        partition = f"city={row['city']}"
        low, high = ranges.get(partition, (row["uuid"], row["uuid"]))
        ranges[partition] = (min(low, row["uuid"]), max(high, row["uuid"]))
    slices = _index_slices(storage, load_timeline(storage), ranges)
    plan = _IndexPlan(h.location, S3Options(), read_properties(storage), None, tuple(slices), ranges)
    keys = sorted(r["_tm_key"] for r in _index_frame(spark, plan).collect())
    assert keys == sorted(f"id-{k:04d}" for k in range(240, 330))  # every stored key in range, none outside
    everything = _IndexPlan(h.location, S3Options(), read_properties(storage), None, tuple(slices))
    assert _index_frame(spark, everything).count() == 330


def _footer_filters(root: Path) -> dict[str, bool]:
    """Per base file, whether its footer holds Hudi's record key bloom filter (and it holds the
    file's keys)."""
    import pyarrow.parquet as pq

    from tidemark.table.bloom_filter import BLOOM_FILTER_KEY, DynamicBloomFilter

    found = {}
    for path in root.rglob("*.parquet"):
        footer = pq.read_metadata(path).metadata or {}
        text = footer.get(BLOOM_FILTER_KEY.encode())
        if text is not None:
            keys = pq.read_table(path, columns=["_hoodie_record_key"]).column(0).combine_chunks()
            assert all(DynamicBloomFilter.parse(text, str(path)).might_contain(keys)), path
        found[path.name] = text is not None
    return found


@pytest.mark.parametrize("table_type", ["MERGE_ON_READ", "COPY_ON_WRITE"])
def test_base_files_carry_the_bloom_filter_unless_switched_off(spark: Any, tmp_path: Path, table_type: str) -> None:
    from tidemark.errors import TableError

    kind = {"hoodie.datasource.write.table.type": table_type}
    h = Harness(spark, str(tmp_path / "t"), "city", True, conf=kind)
    h.write("insert", trips(range(30), ts=1))
    h.write("upsert", trips(range(0, 30, 3), ts=2, fare_base=100) + trips(range(30, 36), ts=2))
    h.check()
    with_filter = _footer_filters(tmp_path / "t")
    assert with_filter
    assert all(with_filter.values())

    # Hudi 0.15's switch, for writers without a BLOOM index: the next files have no filter
    h.options = Harness(
        spark, h.location, "city", True, conf={**kind, "hoodie.parquet.bloom.filter.enabled": "false"}
    ).options
    h.write("upsert", trips(range(1, 30, 3), ts=3, fare_base=200) + trips(range(36, 40), ts=3))
    h.check()
    after = _footer_filters(tmp_path / "t")
    new_files = set(after) - set(with_filter)
    assert new_files
    assert not any(after[f] for f in new_files)

    # a BLOOM index reads the filters: it keeps them whatever the switch says
    h.options = Harness(
        spark,
        h.location,
        "city",
        True,
        conf={**kind, "hoodie.parquet.bloom.filter.enabled": "false", "hoodie.index.type": "BLOOM"},
    ).options
    h.write("upsert", trips(range(2, 30, 3), ts=4, fare_base=300) + trips(range(40, 42), ts=4))
    h.check()
    latest = _footer_filters(tmp_path / "t")
    assert all(latest[f] for f in set(latest) - set(after))

    listing = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    bad = Harness(spark, h.location, "city", True, conf={**kind, "hoodie.parquet.bloom.filter.enabled": "maybe"})
    with pytest.raises(TableError, match=r"hoodie.parquet.bloom.filter.enabled='maybe': expected true or false"):
        bad.write("upsert", trips(range(3), ts=5))
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == listing


def test_keys_deleted_under_a_planned_compaction_come_back_once(spark: Any, tmp_path: Path) -> None:
    # keys deleted in the logs a compaction plan merges, upserted while it is pending and again
    # after it ran: each is in one file group, never two (the index once routed them on top of
    # the compaction, whose new base file lacks them, and the next write inserted them again)
    from tidemark.table.compaction import run_compaction, schedule_compaction
    from tidemark.table.index import FILE_ID, KEY, read_index

    h = Harness(spark, str(tmp_path / "t"), "city", True)
    h.write("insert", trips(range(12), ts=1))
    h.write("delete", trips([0, 1, 2], ts=2))
    requested = schedule_compaction(h.storage)
    assert requested is not None
    h.write("upsert", trips([0, 1, 5], ts=3, fare_base=10))
    # (Apache's hudi-rs does not read logs written on top of a pending compaction: ours only)
    assert data_rows(read_snapshot(h.storage), "uuid", "city") == h.model.sorted_rows()
    run_compaction(h.storage, requested)
    h.write("upsert", trips([0, 1, 5], ts=4, fare_base=20))
    h.check()
    slices = SnapshotReader(h.storage).view.latest_file_slices()
    located = [(r[KEY], r[FILE_ID]) for r in read_index(h.storage, slices).to_pylist()]
    assert len(located) == len({key for key, _ in located}) == 12 - 1  # id-0002 stays deleted


def _codecs(root: Path, pattern: str) -> set[str]:
    import pyarrow.parquet as pq

    return {
        pq.read_metadata(path).row_group(0).column(0).compression
        for path in root.rglob(pattern)
        if pq.read_metadata(path).num_row_groups
    }


def test_the_compression_codec_is_hudis_setting(spark: Any, tmp_path: Path) -> None:
    import functools

    from tidemark.errors import TableError
    from tidemark.logformat import BlockType, read_blocks
    from tidemark.table.compaction import compact, run_compaction
    from tidemark.table.write_handles import ParquetConfig

    conf = {
        "hoodie.parquet.compression.codec": "ZSTD",
        "hoodie.logfile.data.block.format": "parquet",
        # and the other settings of Hudi's Parquet writer: tiny row groups, no dictionaries
        "hoodie.parquet.block.size": "512",
        "hoodie.parquet.dictionary.enabled": "false",
    }
    h = Harness(spark, str(tmp_path / "t"), "city", True, conf=conf)
    h.write("insert", trips(range(30), ts=1))
    h.write("upsert", trips(range(0, 30, 2), ts=2, fare_base=100))
    h.check()
    assert _codecs(tmp_path / "t", "*.parquet") == {"ZSTD"}
    import pyarrow as pa
    import pyarrow.parquet as pq

    def dictionaries(meta: pq.FileMetaData) -> int:
        return sum(
            meta.row_group(g).column(c).has_dictionary_page
            for g in range(meta.num_row_groups)
            for c in range(meta.num_columns)
        )

    base_files = [pq.read_metadata(p) for p in (tmp_path / "t").rglob("*.parquet")]
    assert max(m.num_row_groups for m in base_files) > 1
    assert sum(dictionaries(m) for m in base_files) == 0
    block_codecs = set()
    for log in (tmp_path / "t").rglob("*.log.*"):
        with open_storage(str(log.parent)).open_input(log.name) as source:
            for b in read_blocks(source):
                if b.block_type is BlockType.PARQUET_DATA_BLOCK:
                    footer = pq.read_metadata(pa.BufferReader(b.content()))
                    block_codecs.add(footer.row_group(0).column(0).compression)
                    assert dictionaries(footer) == 0
    assert block_codecs == {"ZSTD"}

    # the compaction writes with its own settings
    before = set((tmp_path / "t").rglob("*.parquet"))
    parquet = ParquetConfig.from_conf({"hoodie.parquet.compression.codec": "gzip"})
    assert compact(h.storage, None, functools.partial(run_compaction, parquet=parquet)) is not None
    assert _codecs(tmp_path / "t", "*.parquet") == {"ZSTD", "GZIP"}
    assert {p for p in (tmp_path / "t").rglob("*.parquet") if p not in before}
    h.check()

    listing = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    bad = Harness(spark, h.location, "city", True, conf={"hoodie.parquet.compression.codec": "lzo"})
    with pytest.raises(TableError, match=r"hoodie.parquet.compression.codec='lzo': tidemark writes snappy, gzip"):
        bad.write("upsert", trips(range(3), ts=5))
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == listing


@pytest.mark.parametrize("table_type", ["MERGE_ON_READ", "COPY_ON_WRITE"])
def test_a_delete_needs_only_the_keys(spark: Any, tmp_path: Path, table_type: str) -> None:
    """Hudi's delete takes keys and partitions: rows whose ordering field is null (as a JSON line
    of keys only, typed by the table, gives them) were refused as an upsert's are. Nor does the
    input's ordering value count: a delete whose row had a lower one than the stored row was
    written with it, and the merge-on-read table kept the row (a copy-on-write table did not)."""
    from tidemark.spark.write_job import write_dataframe

    conf = {"hoodie.datasource.write.table.type": table_type}
    h = Harness(spark, str(tmp_path / "trips"), "city", True, conf=conf)
    h.write("insert", trips(range(10), ts=5))
    keys = [{**r, "ts": None, "rider": None, "fare": None} for r in trips([2, 7], ts=0)]
    keys.append({**trips([4], ts=1)[0], "rider": None, "fare": None})
    schema = "uuid string, ts long, rider string, fare double, city string"
    write_dataframe(spark.createDataFrame(keys, schema), h.location, h.options("delete"))
    h.model.delete(keys)
    h.check()
    assert sorted(r["uuid"] for r in read_snapshot(h.storage).to_pylist()) == [
        f"id-{k:04d}" for k in range(10) if k not in (2, 4, 7)
    ]
    # the keys alone, as Hudi's delete takes them (the precombine column was required); the
    # commit still records the table's columns, not the keys'
    only_keys = [{"uuid": r["uuid"], "city": r["city"]} for r in trips([5], ts=0)]
    write_dataframe(spark.createDataFrame(only_keys, "uuid string, city string"), h.location, h.options("delete"))
    h.model.delete(only_keys)
    h.check()
    latest = json.loads(latest_table_schema(h.storage) or "{}")
    assert [f["name"] for f in latest["fields"] if not f["name"].startswith("_hoodie")] == [
        "uuid",
        "ts",
        "rider",
        "fare",
        "city",
    ]


@pytest.mark.parametrize("table_type", ["MERGE_ON_READ", "COPY_ON_WRITE"])
def test_inserts_write_records_whose_precombine_value_is_null(spark: Any, tmp_path: Path, table_type: str) -> None:
    """Hudi's insert, bulk_insert and insert_overwrite read no ordering value unless they combine
    first, so they write a record whose precombine value is null (they were refused, as an
    upsert's are); a later update of it wins over the null, in both readers and the compaction."""
    from tidemark.errors import TableError
    from tidemark.spark.write_job import WriteOptions, write_dataframe

    def unordered(keys: list[int]) -> list[dict[str, Any]]:
        return [{**r, "ts": None} for r in trips(keys, ts=0)]

    conf = {"hoodie.datasource.write.table.type": table_type}
    h = Harness(spark, str(tmp_path / "trips"), "city", True, conf=conf)
    h.write("insert", trips(range(3), ts=1) + unordered([3]))
    h.write("bulk_insert", trips([4], ts=1) + unordered([5]))
    h.write("insert_overwrite", trips([8], ts=1) + unordered([11]))  # both in chennai
    h.check()
    assert [r["ts"] for r in read_snapshot(h.storage).to_pylist() if r["uuid"] in ("id-0003", "id-0011")] == [
        None,
        None,
    ]
    h.write("upsert", trips([3, 11], ts=2, fare_base=300))
    h.check()
    if table_type == "MERGE_ON_READ":
        from tidemark.table.compaction import compact

        assert compact(h.storage) is not None
        h.check()
    # an insert that combines first orders by it, as Hudi's (and an upsert) refuses a null one
    combined = WriteOptions(
        "insert", ("uuid",), "ts", ("city",), True, conf={**conf, "hoodie.combine.before.insert": "true"}
    )
    with pytest.raises(TableError, match="precombine field ts is null: insert orders each key's versions by it"):
        write_dataframe(spark.createDataFrame(trips([20], ts=1) + unordered([21])), h.location, combined)
    h.check()


def test_a_field_added_to_a_struct_survives_the_merge_and_the_compaction(spark: Any, tmp_path: Path) -> None:
    """An upsert whose struct (and array-of-struct, map-of-struct) columns gained a field: the
    merge typed the logged records by the base file's columns and cut the new field (hudi-rs
    read it), and a compaction then wrote it away for good."""
    from tidemark.spark.hudi_options import write
    from tidemark.table.compaction import compact

    location = str(tmp_path / "t")
    options = hudi_options({"hoodie.datasource.write.table.type": "MERGE_ON_READ"})
    write(
        spark.sql("select 'a' id, 1L ts, named_struct('x', 1) st, array(named_struct('x', 1)) arr"), location, **options
    )
    write(
        spark.sql(
            "select 'a' id, 2L ts, named_struct('x', 5, 'y', cast('new' as string)) st,"
            " array(named_struct('x', 6, 'y', cast('item' as string))) arr"
        ),
        location,
        **options,
    )
    want = [{"id": "a", "st": {"x": 5, "y": "new"}, "arr": [{"x": 6, "y": "item"}]}]
    storage = open_storage(location)
    assert read_snapshot(storage).select(["id", "st", "arr"]).to_pylist() == want
    assert apache_snapshot(location).select(["id", "st", "arr"]).to_pylist() == want
    assert compact(storage) is not None
    assert read_snapshot(storage).select(["id", "st", "arr"]).to_pylist() == want
    assert apache_snapshot(location).select(["id", "st", "arr"]).to_pylist() == want


@pytest.mark.parametrize("table_type", ["MERGE_ON_READ", "COPY_ON_WRITE"])
def test_a_long_promoted_to_float_reads_as_float_in_every_reader(spark: Any, tmp_path: Path, table_type: str) -> None:
    """long to float is one of Avro's promotions; it rounds (2^24 + 1 is no float). Merge-on-read
    read the column as double (Arrow widened int64 and float32 past it), where hudi-rs reads the
    declared float; copy-on-write failed the rewrite of the stored value."""
    import pyarrow as pa

    from tidemark.spark.hudi_options import write

    location = str(tmp_path / "t")
    options = hudi_options({"hoodie.datasource.write.table.type": table_type})
    write(spark.sql("select 'a' id, 1L ts, 16777217L l"), location, **options)
    write(spark.sql("select 'b' id, 2L ts, cast(1.5 as float) l"), location, **options)
    write(spark.sql("select 'c' id, 3L ts, cast(2.5 as float) l"), location, **options)
    if table_type == "COPY_ON_WRITE":  # the stored row rewritten beside an update
        write(spark.sql("select 'b' id, 4L ts, cast(3.5 as float) l"), location, **options)
    want = [("a", 16777216.0), ("b", 3.5 if table_type == "COPY_ON_WRITE" else 1.5), ("c", 2.5)]
    ours = read_snapshot(open_storage(location))
    theirs = apache_snapshot(location)
    for table in (ours, theirs):
        assert table.schema.field("l").type == pa.float32()
        assert sorted(zip(table["id"].to_pylist(), table["l"].to_pylist(), strict=True)) == want
    from tidemark.spark import register

    register(spark)
    df = spark.read.format("tidemark").load(location)
    assert df.schema["l"].dataType.typeName() == "float"
    assert sorted((r.id, r.l) for r in df.collect()) == want


def test_widened_columns_keep_their_new_values_on_merge_on_read(spark: Any, tmp_path: Path) -> None:
    """float to double and int to long, written as log blocks over a base file of the old types:
    the merge typed the log rows by the base file, so 1e300 read as inf and 0.1 as 0.10000000149,
    and an int beyond 32 bits made it guess every column's type (an untouched int column and a
    nested int came out as int64); the compaction wrote all that into the new base file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tidemark.spark.hudi_options import write
    from tidemark.table.compaction import compact

    location = str(tmp_path / "t")
    options = hudi_options({"hoodie.datasource.write.table.type": "MERGE_ON_READ"})
    row = "select '{}' id, 1L ts, cast({} as float) f, {} n, {} other, named_struct('x', {}) st"
    write(spark.sql(row.format("a", 1.5, 1, 7, 1)), location, **options)
    write(spark.sql(row.format("b", 2.5, 2, 8, 2)), location, **options)
    widened = "select 'a' id, 2L ts, 1e300 f, 5000000000L n, 7 other, named_struct('x', 1) st union all "
    widened += "select 'b' id, 2L ts, 0.1 f, 3L n, 8 other, named_struct('x', 2) st"
    write(spark.sql(widened), location, **options)
    want = [("a", 1e300, 5000000000, 7, {"x": 1}), ("b", 0.1, 3, 8, {"x": 2})]
    storage = open_storage(location)
    types = {"f": pa.float64(), "n": pa.int64(), "other": pa.int32(), "st": pa.struct([pa.field("x", pa.int32())])}

    def check() -> None:
        for table in (read_snapshot(storage), apache_snapshot(location)):
            assert {n: table.schema.field(n).type for n in types} == types
            rows = table.select(["id", "f", "n", "other", "st"]).to_pylist()
            assert sorted(tuple(r.values()) for r in rows) == want

    assert load_timeline(storage).completed().instants[-1].action == "deltacommit"  # logged, not rewritten
    check()
    assert compact(storage) is not None
    check()
    newest = max((tmp_path / "t").rglob("*.parquet"), key=lambda p: p.name.rsplit("_", 1)[1])
    assert {n: pq.read_schema(newest).field(n).type for n in types} == types  # as the commit declares


@pytest.mark.parametrize("table_type", ["MERGE_ON_READ", "COPY_ON_WRITE"])
def test_missing_columns_are_null_under_hudis_switch_and_refused_without(
    spark: Any, tmp_path: Path, table_type: str
) -> None:
    """``hoodie.write.set.null.for.missing.columns=true`` fills the table's columns an input lacks
    with nulls, as Hudi's writer does; it was ignored without a word, and the write refused."""
    from tidemark.errors import TableError
    from tidemark.spark.hudi_options import write

    location = str(tmp_path / "t")
    options = hudi_options({"hoodie.datasource.write.table.type": table_type})
    write(spark.sql("select 'a' id, 1L ts, 'x' s, 1 n union all select 'b', 1L, 'y', 2"), location, **options)
    lacking = spark.sql("select 'a' id, 2L ts, 10 n union all select 'c', 2L, 30")
    with pytest.raises(TableError, match="column s is missing"):
        write(lacking, location, **options)
    write(lacking, location, **options, **{"hoodie.write.set.null.for.missing.columns": "true"})
    want = [("a", None, 10), ("b", "y", 2), ("c", None, 30)]
    for table in (read_snapshot(open_storage(location)), apache_snapshot(location)):
        assert sorted((r["id"], r["s"], r["n"]) for r in table.select(["id", "s", "n"]).to_pylist()) == want


@pytest.mark.parametrize("table_type", ["MERGE_ON_READ", "COPY_ON_WRITE"])
def test_missing_struct_fields_are_null_under_hudis_switch(spark: Any, tmp_path: Path, table_type: str) -> None:
    """Hudi's switch fills a struct's missing fields too, at any depth, in array items and map
    values too; they were refused ("column st.b is missing"). A null struct stays null."""
    from tidemark.spark.hudi_options import write

    location = str(tmp_path / "t")
    options = hudi_options({"hoodie.datasource.write.table.type": table_type})
    old = "select '{}' id, 1L ts, named_struct('a', {}, 'b', 'x', 'in', named_struct('c', 1, 'd', 'y')) st, "
    old += "array(named_struct('q', 1, 'r', 'y')) l, map('k', named_struct('q', 1, 'r', 'y')) m"
    write(spark.sql(old.format("a", 1) + " union all " + old.format("b", 2)), location, **options)
    lacking = spark.sql(
        "select 'a' id, 2L ts, named_struct('a', 10, 'in', named_struct('c', 5)) st, "
        "array(named_struct('q', 7)) l, map('k', named_struct('q', 8)) m union all "
        "select 'c' id, 2L ts, cast(null as struct<a: int, `in`: struct<c: int>>) st, "
        "cast(null as array<struct<q: int>>) l, cast(null as map<string, struct<q: int>>) m"
    )
    write(lacking, location, **options, **{"hoodie.write.set.null.for.missing.columns": "true"})
    want = [
        ("a", {"a": 10, "b": None, "in": {"c": 5, "d": None}}, [{"q": 7, "r": None}], [("k", {"q": 8, "r": None})]),
        ("b", {"a": 2, "b": "x", "in": {"c": 1, "d": "y"}}, [{"q": 1, "r": "y"}], [("k", {"q": 1, "r": "y"})]),
        ("c", None, None, None),
    ]
    for table in (read_snapshot(open_storage(location)), apache_snapshot(location)):
        got = table.select(["id", "st", "l", "m"]).to_pylist()
        assert sorted((r["id"], r["st"], r["l"], r["m"]) for r in got) == want


def test_integers_promoted_to_float_and_bytes_to_string_keep_their_new_values_on_merge_on_read(
    spark: Any, tmp_path: Path
) -> None:
    """int to float and long to float (in a struct too), written as log blocks over a base file
    of the old types: the fractions were cut (1.5 read as 1.0), as Arrow widened both types to
    double and the merge then kept the base file's; the compaction made it permanent. bytes to
    string read as bytes where the table declares a string."""
    import pyarrow as pa

    from tidemark.spark.hudi_options import write
    from tidemark.spark.read import read_dataframe
    from tidemark.table.compaction import compact

    location = str(tmp_path / "t")
    options = hudi_options({"hoodie.datasource.write.table.type": "MERGE_ON_READ"})
    old = "select '{}' id, 1L ts, {} i, {}L l, named_struct('x', {}) st, cast('{}' as binary) e"
    write(spark.sql(old.format("a", 1, 1, 1, "b") + " union all " + old.format("b", 2, 2, 2, "b")), location, **options)
    new = "select 'a' id, 2L ts, cast(1.5 as float) i, cast(2.5 as float) l, named_struct('x', cast(3.5 as float)) st, "
    write(spark.sql(new + "'text' e"), location, **options)
    want = [("a", 1.5, 2.5, {"x": 3.5}, "text"), ("b", 2.0, 2.0, {"x": 2.0}, "b")]
    types = {"i": pa.float32(), "l": pa.float32(), "e": pa.string()}
    storage = open_storage(location)

    def check() -> None:
        for table in (read_snapshot(storage), apache_snapshot(location), read_dataframe(spark, location).toArrow()):
            assert {n: table.schema.field(n).type for n in types} == types
            assert sorted(tuple(r.values()) for r in table.select(["id", "i", "l", "st", "e"]).to_pylist()) == want

    assert load_timeline(storage).completed().instants[-1].action == "deltacommit"  # logged, not rewritten
    check()
    assert compact(storage) is not None
    check()


def test_numbers_promoted_twice_read_in_the_declared_types_at_any_depth(spark: Any, tmp_path: Path) -> None:
    """int, then long, then float, in a map, a struct, a list and a column, logged over a base
    file: 5000000000 is no exact float, so the log rows were built by inferring types (a map
    came out a struct) and no reader nor the compaction worked; a struct's, list's or map's float
    read as double. Now every reader has the declared float, values rounded as Java rounds them
    (16777217 is 16777216.0), and the compaction writes float."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tidemark.spark.hudi_options import write
    from tidemark.spark.read import read_dataframe
    from tidemark.table.compaction import compact

    location = str(tmp_path / "t")
    options = hudi_options({"hoodie.datasource.write.table.type": "MERGE_ON_READ"})
    row = "select '{}' id, {}L ts, map('q', {v}) m, named_struct('x', {v}) st, array({v}) l, {v} n"
    write(spark.sql(" union all ".join(row.format(k, 0, v=16777217) for k in ("a", "b", "c"))), location, **options)
    write(spark.sql(row.format("b", 1, v="5000000000L")), location, **options)
    write(spark.sql(row.format("c", 2, v="cast(1.5 as float)")), location, **options)
    want = [(k, [("q", v)], {"x": v}, [v], v) for k, v in (("a", 16777216.0), ("b", 5e9), ("c", 1.5))]
    storage = open_storage(location)

    def check(table: pa.Table) -> None:
        m, st, lst, n = (table.schema.field(c).type for c in ("m", "st", "l", "n"))
        assert (m.item_type, st.field("x").type, lst.value_type, n) == (pa.float32(),) * 4
        rows = table.select(["id", "m", "st", "l", "n"]).to_pylist()
        assert sorted(tuple(r.values()) for r in rows) == want

    check(read_snapshot(storage))
    check(read_dataframe(spark, location).toArrow())
    assert compact(storage) is not None
    newest = max((tmp_path / "t").rglob("*.parquet"), key=lambda p: p.name.rsplit("_", 1)[1])
    check(pq.read_table(newest))  # the compaction wrote the declared float, as hudi-rs reads it
    for table in (read_snapshot(storage), read_dataframe(spark, location).toArrow(), apache_snapshot(location)):
        check(table)


def test_a_table_created_without_meta_fields_keeps_them_null(spark: Any, tmp_path: Path) -> None:
    """``hoodie.populate.meta.fields=false`` on the write that creates a table was ignored without
    a word (the table said true, its files held meta fields). Now the table is made as Apache
    makes it: meta columns null, no bloom filter; upserts, deletes and compaction work and
    tidemark's readers and Apache's agree."""
    import pyarrow.parquet as pq

    from tidemark.spark.hudi_options import write
    from tidemark.spark.read import read_dataframe
    from tidemark.table.compaction import compact

    location = str(tmp_path / "t")
    options = hudi_options(
        {"hoodie.populate.meta.fields": "false", "hoodie.datasource.write.table.type": "MERGE_ON_READ"}
    )
    write(spark.sql("select id, 1L ts, v from values ('a', 1), ('b', 2), ('c', 3) as t(id, v)"), location, **options)
    write(spark.sql("select id, 2L ts, v from values ('a', 10), ('d', 4) as t(id, v)"), location, **options)
    delete = {**options, "hoodie.datasource.write.operation": "delete"}
    write(spark.sql("select 'b' id, 3L ts, 0 v"), location, **delete)
    assert "hoodie.populate.meta.fields=false" in (tmp_path / "t" / ".hoodie" / "hoodie.properties").read_text()
    want = [("a", 10), ("c", 3), ("d", 4)]
    storage = open_storage(location)

    def check() -> None:
        for table in (read_snapshot(storage), read_dataframe(spark, location).toArrow(), apache_snapshot(location)):
            assert sorted((r["id"], r["v"]) for r in table.select(["id", "v"]).to_pylist()) == want

    check()
    assert compact(storage) is not None
    check()
    for path in (tmp_path / "t").rglob("*.parquet"):
        data = pq.read_table(path)
        assert all(data.column(m).null_count == data.num_rows for m in ("_hoodie_commit_time", "_hoodie_record_key"))
        assert not any(b"bloom" in k for k in pq.read_metadata(path).metadata)


@pytest.mark.parametrize("table_type", ["MERGE_ON_READ", "COPY_ON_WRITE"])
def test_bytes_promoted_to_string_read_as_java_decodes_them(spark: Any, tmp_path: Path, table_type: str) -> None:
    """Bytes that are no UTF-8, in a column a later write made a string: merge-on-read took the
    write and then no read worked (a UnicodeDecodeError, a failed Spark task, a traceback; the
    compaction wrote the old type); copy-on-write refused it. A sequence that is no UTF-8 now
    reads as U+FFFD, as Java's decoding of the promoted value gives it to Hudi's readers."""
    from tidemark.spark.hudi_options import write
    from tidemark.spark.read import read_dataframe
    from tidemark.table.compaction import compact

    location = str(tmp_path / "t")
    options = hudi_options({"hoodie.datasource.write.table.type": table_type})
    old = "select 'a' id, 1L ts, unhex('FFFE41') e union all select 'b', 1L, unhex('4142')"
    write(spark.sql(old), location, **options)
    write(spark.sql("select 'b' id, 2L ts, 'text' e"), location, **options)
    want = [("a", "\ufffd\ufffdA"), ("b", "text")]
    storage = open_storage(location)

    def check() -> None:
        for table in (read_snapshot(storage), read_dataframe(spark, location).toArrow()):
            assert sorted((r["id"], r["e"]) for r in table.select(["id", "e"]).to_pylist()) == want

    check()
    if table_type == "MERGE_ON_READ":
        assert compact(storage) is not None
        check()
        assert sorted((r["id"], r["e"]) for r in apache_snapshot(location).select(["id", "e"]).to_pylist()) == want


def test_byte_and_short_columns_are_written_as_avro_ints(spark: Any, tmp_path: Path) -> None:
    """Spark's ByteType and ShortType went into Parquet as 8- and 16-bit ints, where Apache's
    files (Avro's int) hold plain 32-bit ones, and hudi-rs refused a table whose Parquet log
    blocks held them."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tidemark.spark.hudi_options import write

    location = str(tmp_path / "t")
    options = hudi_options({"hoodie.logfile.data.block.format": "parquet"})
    write(spark.sql("select 'a' id, 1L ts, cast(7 as short) sh, cast(1 as byte) b"), location, **options)
    write(spark.sql("select 'a' id, 2L ts, cast(8 as short) sh, cast(2 as byte) b"), location, **options)
    (base,) = (tmp_path / "t").rglob("*.parquet")
    assert {f.name: f.type for f in pq.read_schema(base)}.items() >= {"sh": pa.int32(), "b": pa.int32()}.items()
    want = [{"id": "a", "sh": 8, "b": 2}]
    assert read_snapshot(open_storage(location)).select(["id", "sh", "b"]).to_pylist() == want
    assert apache_snapshot(location).select(["id", "sh", "b"]).to_pylist() == want


@pytest.mark.parametrize("table_type", ["MERGE_ON_READ", "COPY_ON_WRITE"])
def test_merge_update_follows_spark_sql_and_keeps_the_column_type(spark: Any, tmp_path: Path, table_type: str) -> None:
    """The write computes a merge_update with Spark SQL and tidemark's reader again in Python:
    ``v % 3`` of -7 read 2 in tidemark and -1 in Apache's reader (Python's remainder against
    Java's), and ``v / 2`` on a bigint column made the column a double that later upserts were
    refused for. The remainder now follows Spark; an expression changing its column's type, or of
    non-numeric columns, is refused before anything is written."""
    from tidemark.errors import TableError
    from tidemark.spark.write_job import WriteOptions, write_dataframe
    from tidemark.storage import LocalStorage

    location = str(tmp_path / "t")
    schema = "id string, ts long, v long, day date, p string"
    rows = [("a", 1, -7, None, "x"), ("b", 1, 7, None, "x")]
    options = WriteOptions("upsert", ("id",), "ts", ("p",), table_type=table_type)
    write_dataframe(spark.createDataFrame(rows, schema), location, options)
    keys = spark.createDataFrame([("a", "x"), ("b", "x")], "id string, p string")
    write_dataframe(keys, location, WriteOptions("merge_update", set_expressions={"v": "v % 3"}))
    expected = {"a": -1, "b": 1}
    assert {r["id"]: r["v"] for r in read_snapshot(LocalStorage(location)).to_pylist()} == expected
    assert {r["id"]: r["v"] for r in apache_snapshot(location).to_pylist()} == expected
    listing = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    for column, text, message in [
        ("v", "v / 2", r"v=v / 2: it gives double for the bigint column v"),
        ("day", "day + 1", r"day=day \+ 1: it gives date for the date column day"),
    ]:
        with pytest.raises(TableError, match=message):
            write_dataframe(keys, location, WriteOptions("merge_update", set_expressions={column: text}))
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == listing


def test_merge_update_keys_without_their_partition_are_refused_before_anything_is_written(
    spark: Any, tmp_path: Path
) -> None:
    """A merge_update's keys are looked up in their partition: keys without the partition column
    failed on Spark's unresolved column, and keys whose partition was null committed an empty
    write ("0 updated") after looking every key up in __HIVE_DEFAULT_PARTITION__."""
    from tidemark.errors import TableError
    from tidemark.spark.write_job import WriteOptions, write_dataframe

    location = str(tmp_path / "t")
    rows = [("a", 1, 10, "x")]
    write_dataframe(
        spark.createDataFrame(rows, "id string, ts long, v long, p string"),
        location,
        WriteOptions("upsert", ("id",), "ts", ("p",)),
    )
    listing = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    update = WriteOptions("merge_update", set_expressions={"v": "v * 2"})
    for keys, message in [
        (spark.createDataFrame([("a", 3)], "id string, ts long"), "the input has no partition field column p "),
        (
            spark.createDataFrame([("a", None)], "id string, p string"),
            "the input's partition field p is null on every record",
        ),
    ]:
        with pytest.raises(TableError, match=message):
            write_dataframe(keys, location, update)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == listing
    assert [r["v"] for r in read_snapshot(open_storage(location)).to_pylist()] == [10]


def test_merge_update_overflow_reads_as_spark_sql_computed_it(spark: Any, tmp_path: Path) -> None:
    """Without ANSI mode Spark wraps an int or a long that overflows, and the log blocks carry
    that; tidemark evaluated the expression again with Python's unbounded integers: the Spark
    source failed ("Integer value 10737418235 not in range"), a long failed every read ("Python
    int too large to convert to C long"), and a compaction wrote an int Hudi's reader took for
    null. Every reader, before and after compaction, now reads what Spark computed."""
    from tidemark.spark.datasource import register
    from tidemark.spark.write_job import WriteOptions, write_dataframe
    from tidemark.table.compaction import compact

    location = str(tmp_path / "t")
    rows = [("a", 1, 5, 7, "x")]
    options = WriteOptions("upsert", ("id",), "ts", ("p",), table_type="MERGE_ON_READ")
    write_dataframe(spark.createDataFrame(rows, "id string, ts long, n int, m long, p string"), location, options)
    keys = spark.createDataFrame([("a", "x")], "id string, p string")
    with ansi_off(spark):
        expressions = {"n": "n * 2147483647", "m": "m * 9223372036854775807"}
        write_dataframe(keys, location, WriteOptions("merge_update", set_expressions=expressions))
    register(spark)

    def readers() -> dict[str, list[dict[str, Any]]]:
        source = spark.read.format("tidemark").load(location).select("id", "n", "m")
        return {
            "read_snapshot": read_snapshot(open_storage(location)).select(["id", "n", "m"]).to_pylist(),
            "apache": apache_snapshot(location).select(["id", "n", "m"]).to_pylist(),
            "spark source": [r.asDict() for r in source.collect()],
        }

    spark_sql = [{"id": "a", "n": 2147483643, "m": 9223372036854775801}]  # what Spark computes
    assert readers() == dict.fromkeys(["read_snapshot", "apache", "spark source"], spark_sql)
    assert compact(open_storage(location)) is not None
    assert readers() == dict.fromkeys(["read_snapshot", "apache", "spark source"], spark_sql)


def test_a_kafka_password_given_inline_fails_the_write_before_anything_is_written(spark: Any, tmp_path: Path) -> None:
    """The write committed and only then warned that its event was not published: the password
    had been on its command line all along."""
    from tidemark.errors import TableError
    from tidemark.spark.write_job import WriteOptions, write_dataframe

    conf = {"tidemark.events.bootstrap": "127.0.0.1:9", "tidemark.kafka.sasl.password": "hunter2"}
    options = WriteOptions("upsert", ("uuid",), "ts", ("city",), conf=conf)
    with pytest.raises(TableError, match=r"event settings: .*tidemark.kafka.sasl.password") as refused:
        write_dataframe(spark.createDataFrame(trips(range(3), ts=1)), str(tmp_path / "t"), options)
    assert "hunter2" not in str(refused.value)
    assert not (tmp_path / "t").exists()


def test_a_coordinator_url_without_its_marker_type_fails_the_write_before_anything_is_written(
    spark: Any, tmp_path: Path
) -> None:
    """The URL alone was ignored: the write committed with direct markers and the coordinator
    never heard of it (Hudi's own timeline-server markers need the type set too)."""
    from tidemark.errors import TableError
    from tidemark.spark.write_job import WriteOptions, write_dataframe

    conf = {"tidemark.writer.coordinator.url": "http://127.0.0.1:9"}
    options = WriteOptions("upsert", ("uuid",), "ts", ("city",), conf=conf)
    with pytest.raises(TableError, match=r"set it, or drop the URL") as refused:
        write_dataframe(spark.createDataFrame(trips(range(3), ts=1)), str(tmp_path / "t"), options)
    assert "hoodie.write.markers.type=TIMELINE_SERVER_BASED" in str(refused.value)
    assert not (tmp_path / "t").exists()


def test_a_misspelt_coordinator_key_fails_the_write_before_anything_is_written(spark: Any, tmp_path: Path) -> None:
    """A misspelt key was ignored: the write went on with direct markers (or without its token)
    and the coordinator never heard of it. A conf shared with the coordinator (its TLS files) is
    taken as it is."""
    from tidemark.errors import TableError
    from tidemark.spark.write_job import WriteOptions, write_dataframe

    for typo, meant in (
        ("tidemark.writer.cordinator.url", "tidemark.writer.coordinator.url"),
        ("tidemark.writer.coordinator.token.fle", "tidemark.writer.coordinator.token.file"),
    ):
        conf = {"hoodie.write.markers.type": "TIMELINE_SERVER_BASED", typo: "x"}
        if "url" not in typo:
            conf["tidemark.writer.coordinator.url"] = "http://127.0.0.1:9"
        options = WriteOptions("upsert", ("uuid",), "ts", ("city",), conf=conf)
        with pytest.raises(TableError) as refused:
            write_dataframe(spark.createDataFrame(trips(range(3), ts=1)), str(tmp_path / "t"), options)
        assert f"unknown writer-coordinator setting(s) {typo} (did you mean {meant}?)" in str(refused.value)
        assert not (tmp_path / "t").exists()
    shared = {
        "tidemark.writer.coordinator.tls.cert.file": "/nonexistent/server.crt",
        "tidemark.writer.coordinator.tls.key.file": "/nonexistent/server.key",
        "tidemark.writer.coordinator.auth": "none",
        "tidemark.writer.coordinator.max.body.bytes": "1048576",
    }
    h = Harness(spark, str(tmp_path / "t"), "city", True, conf=shared)
    h.write("upsert", trips(range(3), ts=1))
    h.check()


def test_key_fields_given_as_text_are_hudis_comma_separated_names() -> None:
    """A string was iterated as a tuple: record key "id" looked for columns "i" and "d"."""
    from tidemark.spark.write_job import WriteOptions

    options = WriteOptions("upsert", record_key="id, name", partition_fields="city")  # type: ignore[arg-type]
    assert (options.record_key, options.partition_fields) == (("id", "name"), ("city",))
    assert WriteOptions("upsert", record_key=("id",), partition_fields="").partition_fields == ()  # type: ignore[arg-type]


def test_a_pathlib_path_is_a_location_as_open_storage_takes_it(spark: Any, tmp_path: Path) -> None:
    """tidemark.spark.write, read_dataframe and compact_on_spark failed on a pathlib.Path
    ('no attribute partition', '_get_object_id', 'not iterable')."""
    import tidemark.spark
    from tidemark.spark.compaction_job import compact_on_spark
    from tidemark.spark.read import read_dataframe

    location = tmp_path / "t"
    options = {"hoodie.table.name": "t", "hoodie.datasource.write.recordkey.field": "id"}
    tidemark.spark.write(spark.createDataFrame([(1, 1)], "id int, ts long"), location, **options)
    tidemark.spark.write(spark.createDataFrame([(1, 2)], "id int, ts long"), location, **options)
    assert [r.ts for r in read_dataframe(spark, location).collect()] == [2]
    assert compact_on_spark(spark, location) is not None


def test_a_hudi_options_dict_given_to_write_dataframe_points_to_tidemark_spark_write(
    spark: Any, tmp_path: Path
) -> None:
    from tidemark.spark.write_job import write_dataframe

    options = {"hoodie.table.name": "t", "hoodie.datasource.write.recordkey.field": "id"}
    df = spark.createDataFrame([(1, 1)], "id int, ts long")
    with pytest.raises(TypeError, match=r"takes a WriteOptions, not dict; .*tidemark\.spark\.write\(df, location"):
        write_dataframe(df, str(tmp_path / "t"), options)  # type: ignore[arg-type]
    assert not (tmp_path / "t").exists()


def test_hive_style_given_as_text_is_a_switch() -> None:
    """A "false" from a config file was a true value: the table was made hive-style."""
    from tidemark.errors import TableError
    from tidemark.spark.write_job import WriteOptions

    assert WriteOptions("insert", hive_style="False").hive_style is False  # type: ignore[arg-type]
    assert WriteOptions("insert", hive_style=" TRUE ").hive_style is True  # type: ignore[arg-type]
    assert WriteOptions("insert", hive_style=False).hive_style is False
    assert WriteOptions("insert").hive_style is None
    with pytest.raises(TableError, match=r"^hive_style='yes': expected true or false$"):
        WriteOptions("insert", hive_style="yes")  # type: ignore[arg-type]
    with pytest.raises(TableError, match=r"^hive_style=1: expected true or false$"):
        WriteOptions("insert", hive_style=1)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("schema", "row", "twins"),
    [
        ("s struct<Id: string, id: string>", {"Id": "A", "id": "a"}, "s.Id and s.id"),
        ("a array<struct<X: int, x: int>>", [{"X": 1, "x": 2}], r"a\[\]\.X and a\[\]\.x"),
        (
            "m map<string, struct<n: struct<V: int, v: int>>>",
            {"k": {"n": {"V": 1, "v": 2}}},
            r"m\{\}\.n\.V and m\{\}\.n\.v",
        ),
    ],
    ids=["struct", "array-items", "map-values"],
)
def test_nested_fields_that_differ_only_in_case_are_refused_before_anything_is_written(
    spark: Any, tmp_path: Path, schema: str, row: Any, twins: str
) -> None:
    """They were written, and the default (case-insensitive) session then failed to select them
    (AMBIGUOUS_REFERENCE_TO_FIELDS); top-level ones and JSON keys were refused already."""
    from tidemark.errors import TableError
    from tidemark.spark.write_job import WriteOptions, write_dataframe

    df = spark.createDataFrame([("k1", 1, row)], f"id string, ts long, {schema}")
    with pytest.raises(TableError, match=rf"^columns {twins} differ only in case: .*; rename one$"):
        write_dataframe(df, str(tmp_path / "t"), WriteOptions("insert", ("id",), "ts"))
    assert not (tmp_path / "t").exists()


def test_a_struct_without_fields_is_refused_before_anything_is_written(spark: Any, tmp_path: Path) -> None:
    """Every task failed at pyarrow's Parquet writer, and a table (hoodie.properties and a
    rollback) was left behind."""
    from tidemark.errors import TableError
    from tidemark.spark.write_job import WriteOptions, write_dataframe

    schema = "id string, ts long, s struct<>, a array<struct<n: struct<>>>, m map<string, struct<>>"
    df = spark.createDataFrame([("k1", 1, (), [{"n": ()}], {"k": ()})], schema)
    with pytest.raises(TableError, match=r"^column 's', 'a\[\]\.n', 'm\{\}': a struct without fields, .*drop it$"):
        write_dataframe(df, str(tmp_path / "t"), WriteOptions("insert", ("id",), "ts"))
    assert not (tmp_path / "t").exists()


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_commit_seqnos_are_unique_when_a_task_writes_several_file_groups(
    spark: Any, tmp_path: Path, table_type: str
) -> None:
    """One task numbered each file group it wrote from 0 under its partition id, so rows of two
    groups shared a ``_hoodie_commit_seqno``. Now an insert (new base files), then an upsert of
    every key (base files rewritten, or log blocks), give each row of the commit its own."""
    from tidemark.spark.hudi_options import write

    location = str(tmp_path / "t")
    options = hudi_options(
        {
            "hoodie.datasource.write.table.type": table_type,
            "hoodie.copyonwrite.insert.auto.split": "false",
            "hoodie.copyonwrite.insert.split.size": "1",  # a file group per key
        }
    )
    storage = open_storage(location)
    keys = ", ".join(f"('k{i}', {i})" for i in range(12))
    for ts, operation in ((1, "insert"), (2, "upsert")):
        df = spark.sql(f"select id, {ts}L ts, v from values {keys} as t(id, v)").coalesce(1)
        write(df, location, **{**options, "hoodie.datasource.write.operation": operation})
        instant = load_timeline(storage).completed().write_instants().last()
        assert instant is not None
        rows = read_snapshot(storage).to_pylist()
        assert {r["_hoodie_commit_time"] for r in rows} == {instant.timestamp}
        seqnos = [r["_hoodie_commit_seqno"] for r in rows]
        assert len(set(seqnos)) == len(rows) == 12
        assert all(s.startswith(f"{instant.timestamp}_") for s in seqnos)
        # what the test is about: some task wrote several file groups (fewer tasks than groups)
        stats = instant_metadata(storage, instant).write_stats()
        assert len({s.extra["tidemarkWriteToken"] for s in stats}) < len({s.file_id for s in stats})


@pytest.mark.parametrize(
    ("table_type", "operation"),
    [("MERGE_ON_READ", "insert"), ("MERGE_ON_READ", "bulk_insert"), ("COPY_ON_WRITE", "bulk_insert")],
)
def test_new_base_files_are_sized_by_max_file_size(spark: Any, tmp_path: Path, table_type: str, operation: str) -> None:
    """Merge-on-read inserts and every bulk_insert made file groups of
    ``hoodie.copyonwrite.insert.split.size`` (500,000) records whatever their size: one 2.8 MB base
    file here. Now, as copy-on-write inserts and Hudi, groups of ``max.file.size / record size``
    records: several base files, each near the limit."""
    import os

    from tidemark.spark.hudi_options import write

    limit = 512 * 1024
    location = str(tmp_path / "t")
    # ~1 KB a record once written (random hex: snappy keeps it), Hudi's record size estimate
    rows = [(f"k{i:05d}", 1, os.urandom(450).hex()) for i in range(3000)]
    df = spark.createDataFrame(rows, "id string, ts long, pad string")
    options = {
        "hoodie.datasource.write.table.type": table_type,
        "hoodie.datasource.write.operation": operation,
        "hoodie.parquet.max.file.size": str(limit),
        # its footer's bloom filter (~430 KB for Hudi's 60,000 entries) would dwarf files this small
        "hoodie.parquet.bloom.filter.enabled": "false",
    }
    write(df, location, **hudi_options(options))
    storage = open_storage(location)
    view = FileSystemView(storage, load_timeline(storage))
    sizes = sorted(s.base_file.size for g in view.file_groups("") for s in g.slices if s.base_file)
    assert len(sizes) >= 5, sizes
    assert all(limit * 0.7 < size < limit * 1.3 for size in sizes), sizes
    assert len(read_snapshot(storage)) == 3000


def _task_plan(
    table: TableBuilder,
    instant: str,
    buckets: tuple[tuple[str, str], ...],
    hooks: WriteHooks | None = None,
    bases: dict[tuple[str, str], tuple[str, str | None]] | None = None,
) -> _TaskPlan:
    """A write task's plan for ``table`` (local), as the driver sends it to the executors."""
    return _TaskPlan(
        location=table.storage.uri,
        s3=S3Options(),
        instant=instant,
        action=table.write_action,
        schema_json=table.schema,
        data_columns=("id", "ts", "v", "p"),
        precombine="ts",
        hooks=hooks or WriteHooks(),
        rollover_bytes=None,
        copy_on_write=table.copy_on_write,
        buckets=buckets,
        bases=bases or {},
        key_column="id",
    )


def _task_rows(keys: list[str], kind: str, bucket: int = 0) -> Iterator[pa.RecordBatch]:
    """``keys`` as the shuffle delivers them to a write task: ``kind`` (insert, update) into ``bucket``."""
    rows = _table(keys, 1)
    n = rows.num_rows
    rows = rows.append_column(_BUCKET, pa.array([bucket] * n, pa.int32()))
    return iter(rows.append_column(_KIND, pa.array([_KINDS.index(kind)] * n, pa.int8())).to_batches())


def _files_of(root: Path, instant: str) -> list[str]:
    """The data files and markers of ``instant`` under ``root``."""
    data = [p.name for p in root.rglob("*") if p.is_file() and instant in p.name and ".hoodie" not in p.parts]
    return sorted(data + [p.name for p in (root / ".hoodie" / ".temp").rglob("*") if p.is_file()])


#: a write whose driver stalled: its heartbeat expires at once
_IMPATIENT = ConcurrencyConfig(heartbeat_interval_ms=50, heartbeat_tolerable_misses=1)


def _stalled_write(table: TableBuilder) -> PendingWrite:
    """A write begun on ``table`` whose driver stalled past its heartbeat."""
    write = begin_write(table.storage, table.write_action, "upsert", _IMPATIENT)
    write.heartbeat.stop(delete=False)  # its driver stalled: no beat lands
    time.sleep(0.15)
    return write


@pytest.mark.parametrize("ended", ["committed", "rolled back"])
def test_a_task_attempt_going_on_after_its_write_ended_writes_no_marker_nor_file(tmp_path: Path, ended: str) -> None:
    """A task attempt that went on after its write ended (a speculative copy that lost, a cancelled
    job; a driver stalled past its heartbeat, rolled back) wrote its marker and base file for that
    instant, with direct markers; until the next write removed them, hudi-rs failed every read of
    the copy-on-write table ('Timestamp ... is already present in File Group ...'). It now stops
    before its marker, as the writer-coordinator's 410 stops it."""
    table = TableBuilder(LocalStorage(tmp_path / "t"), copy_on_write=True)
    if ended == "committed":
        write = begin_write(table.storage, COMMIT, "insert", ConcurrencyConfig())
        write.commit([], "insert", table.schema)
    else:
        write = _stalled_write(table)
        assert [r.rolled_back.timestamp for r in rollback_pending_writes(table.storage, _IMPATIENT)] == [write.instant]
    plan = _task_plan(table, write.instant, ((PARTITION, "fg-late"),))
    with pytest.raises(InstantStateError, match="is a zombie and writes nothing more"):
        list(_write_partition(plan, _task_rows(["a", "b"], "insert")))
    assert _files_of(tmp_path / "t", write.instant) == []


class _TaskWritingDuringTheRollback(LocalStorage):
    """A rollback's storage: as it deletes the first file of its plan, a task of the write it rolls
    back (its driver stalled, its executors at work) marks and writes another file group."""

    def __init__(self, root: Path, task: Callable[[], object]) -> None:
        super().__init__(root)
        self.task: Callable[[], object] | None = task

    def delete(self, path: str) -> None:
        if self.task is not None and path.endswith(".parquet"):
            task, self.task = self.task, None
            task()
        super().delete(path)


def test_a_rollback_removes_the_files_a_task_wrote_while_it_ran(tmp_path: Path) -> None:
    """A write rolled back while its tasks went on (its driver stalled past its heartbeat) kept the
    files its tasks marked after the rollback listed its markers: the rollback deleted their
    markers, not them, and no later write, clean or archival found them; once archival passed
    the instant, every reader returned them as committed (21,764 rows for 300 seen). The rollback
    now removes what was marked since its plan, once the write is no longer pending."""
    root = tmp_path / "t"
    table = TableBuilder(LocalStorage(root))
    table.insert(["k"], 1)
    write = _stalled_write(table)
    plan = _task_plan(table, write.instant, ((PARTITION, "fg-a"), (PARTITION, "fg-b")))
    list(_write_partition(plan, _task_rows(["a"], "insert", bucket=0)))
    late = _TaskWritingDuringTheRollback(root, lambda: list(_write_partition(plan, _task_rows(["b"], "insert", 1))))
    [result] = rollback_pending_writes(late, _IMPATIENT)
    assert late.task is None, "the task ran during the rollback"
    assert _files_of(root, write.instant) == []
    assert len(result.deleted_files) == 2
    assert sorted(read_snapshot(table.storage).column("id").to_pylist()) == ["k"]


class _RolledBackBeforeItsFirstBlock(WriteHooks):
    """A task whose write is rolled back (by another process) between its log file's marker and
    the file's first byte."""

    def before_append(self, attempt: int) -> BeforeAppend | None:
        def roll_back(sequence: int, writer: object, block: bytes) -> None:
            if sequence == 0:
                rollback_pending_writes(LocalStorage(Path(self.root)), _IMPATIENT)

        return roll_back

    def __init__(self, root: Path) -> None:
        self.root = str(root)


def test_a_task_whose_write_was_rolled_back_while_it_wrote_takes_its_files_away(tmp_path: Path) -> None:
    """A file a task attempt began after its marker, while a rollback of its write ran, landed
    after the rollback had removed what was marked: a log file of the rolled-back instant that
    readers took as committed once archival passed it. The task checks at its end that its write
    is still pending, and takes its files away when not."""
    root = tmp_path / "t"
    table = TableBuilder(LocalStorage(root))
    table.insert(["a", "b"], 1)
    [(group, base_instant)] = table.groups.items()
    base_file = next(p for p in (root / PARTITION).iterdir() if p.suffix == ".parquet")
    write = _stalled_write(table)
    bases = {(PARTITION, group): (base_instant, f"{PARTITION}/{base_file.name}")}
    plan = _task_plan(table, write.instant, ((PARTITION, group),), _RolledBackBeforeItsFirstBlock(root), bases)
    with pytest.raises(InstantStateError, match="is a zombie and writes nothing more"):
        list(_write_partition(plan, _task_rows(["a"], "update")))
    assert [f.name for f in root.rglob("*.log.*")] == []
    assert _files_of(root, write.instant) == []
    assert sorted(read_snapshot(table.storage).column("v").to_pylist()) == [1, 1]


def test_a_stale_attempt_with_the_accepted_attempts_write_token_leaves_the_committed_files(tmp_path: Path) -> None:
    """A task attempt of an earlier try of the write stage (Spark tries a stage again when its
    input fetch fails, counting attempts from 0 again) has the accepted attempt's write token, so
    its file names. Going on after the commit, it found the write over and removed the files it
    had marked: the committed base files."""
    table = TableBuilder(LocalStorage(tmp_path / "t"), copy_on_write=True)
    write = begin_write(table.storage, COMMIT, "insert", ConcurrencyConfig())
    plan = _task_plan(table, write.instant, ((PARTITION, "fg-new"),))
    [batch] = list(_write_partition(plan, _task_rows(["a", "b"], "insert")))
    statuses = [json.loads(s) for s in batch.column("status").to_pylist()]
    write.commit(
        [WriteStat.from_json({k: v for k, v in s.items() if k != "kind"}) for s in statuses], "insert", table.schema
    )
    with pytest.raises(InstantStateError, match="is a zombie and writes nothing more"):
        list(_write_partition(plan, _task_rows(["a", "b"], "insert")))  # the same task, stage try and attempt
    assert sorted(read_snapshot(table.storage).column("id").to_pylist()) == ["a", "b"]
