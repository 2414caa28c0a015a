"""The table's configuration is the default of a write: flags that restate it are accepted,
flags that contradict it are refused, a new table needs its record key, and a key generator
tidemark does not implement is refused by name before anything is written (all before Spark
starts, so these run in a second)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli import listing, tidemark
from tests.support.fixtures import extract_table, fixtures_root
from tidemark.errors import KeyGeneratorError, TableError
from tidemark.storage import LocalStorage
from tidemark.table import properties as P
from tidemark.table.write_client import TableSettings, resolve_table_settings


def _trips(tmp_path: Path) -> Path:
    return extract_table(fixtures_root() / "tables" / "mor" / "v6_trips_8i1u.zip", tmp_path)


def test_an_unknown_key_generator_is_refused_and_nothing_changes(tmp_path: Path) -> None:
    table = _trips(tmp_path)
    storage = LocalStorage(table)
    props = P.read_properties(storage)
    P.write_properties(storage, P.TableProperties({**props.entries, P.KEY_GENERATOR: "com.example.MyKeyGenerator"}))
    source = tmp_path / "in.jsonl"
    source.write_text('{"ts": 1, "uuid": "u", "rider": "r", "driver": "d", "fare": 1.0, "city": "x"}\n')
    before = listing(table)
    proc = tidemark("write", str(table), "--input", str(source), "--operation", "upsert")
    assert proc.returncode == 1
    line = proc.stderr.strip()
    assert "\n" not in line
    assert "key generator com.example.MyKeyGenerator is not supported" in line
    assert listing(table) == before

    # a new table asked for with one: nothing is created
    new = tmp_path / "new"
    conf = ["--conf", "hoodie.datasource.write.keygenerator.class=com.example.MyKeyGenerator"]
    proc = tidemark("write", str(new), "--input", str(source), "--operation", "upsert", "--record-key", "uuid", *conf)
    assert proc.returncode == 1
    assert "com.example.MyKeyGenerator is not supported" in proc.stderr
    assert not new.exists()


def test_a_new_table_needs_its_record_key(tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text('{"id": 1}\n')
    proc = tidemark("write", str(tmp_path / "t"), "--input", str(source), "--operation", "insert")
    assert proc.returncode == 1
    assert "creating a table needs its record key (the column or columns" in proc.stderr
    assert "give --record-key, or hoodie.datasource.write.recordkey.field in a Hudi options dict" in proc.stderr
    assert not (tmp_path / "t").exists()


def test_contradicting_flags_are_refused(tmp_path: Path) -> None:
    table = _trips(tmp_path)
    source = tmp_path / "in.jsonl"
    source.write_text('{"ts": 1, "uuid": "u", "rider": "r", "driver": "d", "fare": 1.0, "city": "x"}\n')
    before = listing(table)
    proc = tidemark(
        "write",
        str(table),
        "--input",
        str(source),
        "--operation",
        "upsert",
        "--record-key",
        "rider",
        "--partition-field",
        "driver",
        "--conf",
        "hoodie.datasource.write.hive_style_partitioning=false",
    )
    assert proc.returncode == 1
    line = proc.stderr.strip()
    assert "record key rider (table: uuid)" in line
    assert "partition field driver (table: city)" in line
    assert "hive-style partitioning false (table: true)" in line
    assert listing(table) == before


def test_the_tables_settings_are_the_default_and_may_be_restated(tmp_path: Path) -> None:
    props = P.read_properties(LocalStorage(_trips(tmp_path)))
    restated = TableSettings.from_conf(
        {
            "hoodie.datasource.write.keygenerator.class": "org.apache.hudi.keygen.SimpleAvroKeyGenerator",
            "hoodie.datasource.write.hive_style_partitioning": "true",
            "hoodie.datasource.write.partitionpath.urlencode": "false",
            "hoodie.datasource.write.payload.class": "org.apache.hudi.common.model.OverwriteWithLatestAvroPayload",
        },
        ("uuid",),
        "ts",
        ("city",),
    )
    for settings in (TableSettings(), restated):
        values = resolve_table_settings("t", props, settings)
        assert values[P.RECORD_KEY_FIELDS] == "uuid"
        assert values[P.PRECOMBINE_FIELD] == "ts"
        assert values[P.PARTITION_FIELDS] == "city"
        assert values[P.HIVE_STYLE] == "true"
        assert values[P.KEY_GENERATOR] == "org.apache.hudi.keygen.SimpleKeyGenerator"
    with pytest.raises(TableError, match=r"payload class .*DefaultHoodieRecordPayload"):
        resolve_table_settings(
            "t", props, TableSettings(payload_class="org.apache.hudi.common.model.DefaultHoodieRecordPayload")
        )
    with pytest.raises(TableError, match=r"key generator .*ComplexKeyGenerator"):
        resolve_table_settings("t", props, TableSettings(key_generator="org.apache.hudi.keygen.ComplexKeyGenerator"))


def test_a_new_tables_key_generator_as_hudi_infers_it() -> None:
    def created(**kw: object) -> dict[str, str]:
        return resolve_table_settings("t", None, TableSettings(**kw))  # type: ignore[arg-type]

    assert created(record_key=("id",))[P.KEY_GENERATOR].endswith("NonpartitionedKeyGenerator")
    assert created(record_key=("id",), partition_fields=("p",))[P.KEY_GENERATOR].endswith(".SimpleKeyGenerator")
    assert created(record_key=("id", "n"), partition_fields=("p",))[P.KEY_GENERATOR].endswith("ComplexKeyGenerator")
    custom = created(record_key=("id",), partition_fields=("p:simple", "ts:timestamp"))
    assert custom[P.KEY_GENERATOR].endswith("CustomKeyGenerator")
    assert custom[P.PARTITION_FIELDS] == "p,ts"  # names, as Hudi records them for a version 6 table
    assert custom["hoodie.datasource.write.partitionpath.field"] == "p:simple,ts:timestamp"
    with pytest.raises(KeyGeneratorError, match="not supported"):
        created(record_key=("id",), key_generator="org.apache.hudi.keygen.GlobalDeleteKeyGenerator")


def test_populate_meta_fields_is_recorded_on_creation_and_a_contradiction_refused(tmp_path: Path) -> None:
    """``hoodie.populate.meta.fields=false`` on the write that creates a table was ignored without
    a word; a write saying otherwise than an existing table is refused, as other settings are,
    and so is a copy-on-write table without them (tidemark cannot update one)."""
    meta_less = TableSettings.from_conf({"hoodie.populate.meta.fields": "false"}, ("id",))
    assert resolve_table_settings("t", None, meta_less)[P.POPULATE_META_FIELDS] == "false"
    props = P.read_properties(LocalStorage(_trips(tmp_path)))
    with pytest.raises(TableError, match=r"hoodie.populate.meta.fields=false \(table: true\)"):
        resolve_table_settings("t", props, meta_less)
    cow = TableSettings.from_conf(
        {"hoodie.populate.meta.fields": "false", "hoodie.datasource.write.table.type": "COPY_ON_WRITE"}, ("id",)
    )
    with pytest.raises(TableError, match="merge-on-read tables without meta fields, not copy-on-write ones"):
        resolve_table_settings("t", None, cow)
