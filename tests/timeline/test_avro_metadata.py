"""Avro timeline metadata: container files as Hudi's serializeAvroMetadata writes them."""

from __future__ import annotations

import copy
import io
from typing import Any

import fastavro
import pytest

from tidemark.errors import InstantMetadataError
from tidemark.timeline import avro_metadata as am
from tidemark.timeline.avro_metadata import (
    CompactionOperation,
    RollbackPartition,
    RollbackRequest,
    compaction_plan,
    deserialize,
    rollback_metadata,
    rollback_plan,
    serialize,
)

FAILED = "20250126040826878"
ROLLBACK = "20250126040936578"
FILE_ID = "0712b9f9-d2d5-4cae-bcf4-8fd7146af503-0"
BASE = "20250126040823628"


def _rollback_metadata_record() -> dict[str, Any]:
    return rollback_metadata(
        ROLLBACK,
        195,
        [FAILED],
        [(FAILED, "deltacommit")],
        {
            "": RollbackPartition(
                ["s3://bucket/t/cd329d8f-0ce4-4654-84ab-2f769aae5034-0_1-33-44_20250126040826878.parquet"],
                [],
                {f"s3://bucket/t/.{FILE_ID}_{BASE}.log.2_1-0-1": 105},
                {f"s3://bucket/t/.{FILE_ID}_{BASE}.log.1_0-33-43": 11828},
            ),
            "city=chennai": (["a.parquet", "b.parquet"], ["c.parquet"], None),
        },
    )


SAMPLES: dict[str, dict[str, Any]] = {
    "HoodieRollbackPlan": rollback_plan(
        (FAILED, "deltacommit"),
        [
            RollbackRequest("", None, None, ["s3://bucket/t/cd32-0_1-33-44_20250126040826878.parquet"], None),
            RollbackRequest("", FILE_ID, BASE, [], {f"s3://bucket/t/.{FILE_ID}_{BASE}.log.1_0-33-43": 11828}),
        ],
    ),
    "HoodieRollbackMetadata": _rollback_metadata_record(),
    "HoodieCompactionPlan": compaction_plan(
        [
            CompactionOperation(
                "city=chennai",
                FILE_ID,
                BASE,
                f"city=chennai/{FILE_ID}_0-3-6_{BASE}.parquet",
                [f"city=chennai/.{FILE_ID}_20250126040900000.log.1_0-8-11"],
                {"TOTAL_LOG_FILES": 1.0, "TOTAL_IO_MB": 0.0, "TOTAL_LOG_FILES_SIZE": 9503.0},
            )
        ],
        {"owner": "tidemark"},
    ),
    "HoodieCleanerPlan": {
        "earliestInstantToRetain": {"timestamp": BASE, "action": "deltacommit", "state": "COMPLETED"},
        "lastCompletedCommitTimestamp": FAILED,
        "policy": "KEEP_LATEST_COMMITS",
        "filesToBeDeletedPerPartition": {},
        "version": 2,
        "filePathsToBeDeletedPerPartition": {
            "city=chennai": [{"filePath": "s3://bucket/t/city=chennai/a.parquet", "isBootstrapBaseFile": False}]
        },
        "partitionsToBeDeleted": [],
        "extraMetadata": {"savepointed_timestamps": "", "earliest_commit_to_not_archive": BASE},
    },
    "HoodieCleanMetadata": {
        "startCleanTime": ROLLBACK,
        "timeTakenInMillis": 12,
        "totalFilesDeleted": 1,
        "earliestCommitToRetain": BASE,
        "lastCompletedCommitTimestamp": FAILED,
        "partitionMetadata": {
            "city=chennai": {
                "partitionPath": "city=chennai",
                "policy": "KEEP_LATEST_COMMITS",
                "deletePathPatterns": ["a.parquet"],
                "successDeleteFiles": ["a.parquet"],
                "failedDeleteFiles": [],
                "isPartitionDeleted": False,
            }
        },
        "version": 2,
        "bootstrapPartitionMetadata": {},
        "extraMetadata": None,
    },
    "HoodieSavepointMetadata": {
        "savepointedBy": "tidemark",
        "savepointedAt": 1_737_000_000,
        "comments": "before backfill",
        "partitionMetadata": {"": {"partitionPath": "", "savepointDataFile": ["a.parquet"]}},
        "version": 1,
    },
    "HoodieRestoreMetadata": {
        "startRestoreTime": ROLLBACK,
        "timeTakenInMillis": 300,
        "instantsToRollback": [FAILED],
        "hoodieRestoreMetadata": {FAILED: [_rollback_metadata_record()]},
        "version": 1,
        "restoreInstantInfo": [{"commitTime": FAILED, "action": "deltacommit"}],
    },
    "HoodieRestorePlan": {
        "instantsToRollback": [{"commitTime": FAILED, "action": "deltacommit"}],
        "version": 2,
        "savepointToRestoreTimestamp": BASE,
    },
    "HoodieRequestedReplaceMetadata": {
        "operationType": "CLUSTER",
        "clusteringPlan": {
            "inputGroups": [
                {
                    "slices": [
                        {
                            "dataFilePath": "a.parquet",
                            "deltaFilePaths": [],
                            "fileId": FILE_ID,
                            "partitionPath": "",
                            "bootstrapFilePath": None,
                            "version": 1,
                        }
                    ],
                    "metrics": {"TOTAL_IO_MB": 1.0},
                    "numOutputFileGroups": 1,
                    "extraMetadata": None,
                    "version": 1,
                }
            ],
            "strategy": {"strategyClassName": "x.Y", "strategyParams": {}, "version": 1},
            "extraMetadata": {},
            "version": 1,
            "preserveHoodieMetadata": True,
        },
        "extraMetadata": {},
        "version": 1,
    },
}


def _header(data: bytes) -> tuple[Any, Any, list[Any]]:
    reader = fastavro.reader(io.BytesIO(data))
    return reader.writer_schema, reader.metadata, list(reader)


# --- round trips ---------------------------------------------------------------------------------


def test_every_named_schema_has_a_sample() -> None:
    assert set(SAMPLES) == set(am.SCHEMAS)
    for name in (
        "HoodieRollbackPlan",
        "HoodieRollbackMetadata",
        "HoodieCompactionPlan",
        "HoodieCleanerPlan",
        "HoodieCleanMetadata",
        "HoodieSavepointMetadata",
        "HoodieRestoreMetadata",
        "HoodieRestorePlan",
        "HoodieRequestedReplaceMetadata",
    ):
        assert name in am.SCHEMAS


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_round_trip(name: str) -> None:
    record = SAMPLES[name]
    assert deserialize(serialize(name, record), name, "x") == record


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_container_file_as_hudi_writes_it(name: str) -> None:
    data = serialize(name, SAMPLES[name])
    assert data.startswith(b"Obj\x01")
    schema, metadata, records = _header(data)
    assert schema["name"] == f"org.apache.hudi.avro.model.{name}"
    assert metadata["avro.codec"] == "null"
    assert len(records) == 1


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_full_names_accepted(name: str) -> None:
    data = serialize(f"org.apache.hudi.avro.model.{name}", SAMPLES[name])
    assert deserialize(data, f"org.apache.hudi.avro.model.{name}", "x") == SAMPLES[name]


def test_restore_plan_union_is_string_first_as_hudi_declares_it() -> None:
    # Hudi declares ["string", "null"]: a savepoint is branch 0, its absence branch 1
    _, _, (record,) = _header(serialize("HoodieRestorePlan", SAMPLES["HoodieRestorePlan"]))
    assert record["savepointToRestoreTimestamp"] == BASE
    schema = {f["name"]: f for f in am.SCHEMAS["HoodieRestorePlan"]["fields"]}
    assert schema["savepointToRestoreTimestamp"]["type"] == ["string", "null"]
    without = dict(SAMPLES["HoodieRestorePlan"], savepointToRestoreTimestamp=None)
    assert deserialize(serialize("HoodieRestorePlan", without), "HoodieRestorePlan", "x") == without


def test_rollback_plan_fields() -> None:
    plan = SAMPLES["HoodieRollbackPlan"]
    assert plan["instantToRollback"] == {"commitTime": FAILED, "action": "deltacommit"}
    assert plan["version"] == 1
    delete, append = plan["RollbackRequests"]
    # Hudi writes empty strings and an empty map, not nulls, for a delete request
    assert delete == {
        "partitionPath": "",
        "fileId": "",
        "latestBaseInstant": "",
        "filesToBeDeleted": ["s3://bucket/t/cd32-0_1-33-44_20250126040826878.parquet"],
        "logBlocksToBeDeleted": {},
    }
    assert append["fileId"] == FILE_ID
    assert append["latestBaseInstant"] == BASE
    assert append["logBlocksToBeDeleted"] == {f"s3://bucket/t/.{FILE_ID}_{BASE}.log.1_0-33-43": 11828}


def test_rollback_plan_accepts_plain_tuples() -> None:
    plan = rollback_plan((FAILED, "commit"), [("p", "f", "1", ("a", "b"), {"l": 3})])
    data = deserialize(serialize("HoodieRollbackPlan", plan), "HoodieRollbackPlan", "x")
    assert data["RollbackRequests"][0]["filesToBeDeleted"] == ["a", "b"]


def test_rollback_metadata_fields() -> None:
    meta = deserialize(serialize("HoodieRollbackMetadata", _rollback_metadata_record()), "HoodieRollbackMetadata", "x")
    assert meta["startRollbackTime"] == ROLLBACK
    assert meta["timeTakenInMillis"] == 195
    assert meta["totalFilesDeleted"] == 3  # successful deletes only, as Hudi counts
    assert meta["commitsRollback"] == [FAILED]
    assert meta["instantsRollback"] == [{"commitTime": FAILED, "action": "deltacommit"}]
    assert meta["version"] == 1
    root = meta["partitionMetadata"][""]
    assert root["partitionPath"] == ""
    assert root["rollbackLogFiles"] == {f"s3://bucket/t/.{FILE_ID}_{BASE}.log.2_1-0-1": 105}
    assert root["logFilesFromFailedCommit"] == {f"s3://bucket/t/.{FILE_ID}_{BASE}.log.1_0-33-43": 11828}
    chennai = meta["partitionMetadata"]["city=chennai"]
    assert chennai["failedDeleteFiles"] == ["c.parquet"]
    assert chennai["rollbackLogFiles"] == {}
    assert chennai["logFilesFromFailedCommit"] == {}


def test_compaction_plan_stores_file_names() -> None:
    plan = deserialize(serialize("HoodieCompactionPlan", SAMPLES["HoodieCompactionPlan"]), "HoodieCompactionPlan", "x")
    assert plan["version"] == 2
    assert plan["extraMetadata"] == {"owner": "tidemark"}
    assert plan["strategy"] is None
    assert plan["preserveHoodieMetadata"] is False
    (op,) = plan["operations"]
    assert op == {
        "baseInstantTime": BASE,
        "deltaFilePaths": [f".{FILE_ID}_20250126040900000.log.1_0-8-11"],
        "dataFilePath": f"{FILE_ID}_0-3-6_{BASE}.parquet",
        "fileId": FILE_ID,
        "partitionPath": "city=chennai",
        "metrics": {"TOTAL_LOG_FILES": 1.0, "TOTAL_IO_MB": 0.0, "TOTAL_LOG_FILES_SIZE": 9503.0},
        "bootstrapFilePath": None,
    }


def test_compaction_plan_log_only_slice_and_no_extra_metadata() -> None:
    plan = compaction_plan([("", "f", BASE, None, [".f_1.log.1_0-1-1"], {"TOTAL_IO_MB": 1})])
    assert plan["extraMetadata"] is None
    back = deserialize(serialize("HoodieCompactionPlan", plan), "HoodieCompactionPlan", "x")
    assert back["operations"][0]["dataFilePath"] is None
    assert back["operations"][0]["metrics"] == {"TOTAL_IO_MB": 1.0}


def test_missing_defaulted_fields_are_filled() -> None:
    data = serialize("HoodieRollbackPlan", {"instantToRollback": {"commitTime": FAILED, "action": "commit"}})
    assert deserialize(data, "HoodieRollbackPlan", "x") == {
        "instantToRollback": {"commitTime": FAILED, "action": "commit"},
        "RollbackRequests": None,
        "version": 1,
    }


# --- bad input to deserialize --------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [b"", b"{}", b"not avro at all", b"Obj", b"Obj\x01", b"Obj\x01\xff\xff\xff\xff\xff\xff", b"\x00" * 64],
    ids=["empty", "json", "text", "magic-prefix", "magic-only", "bad-header", "zeros"],
)
def test_garbage_raises(data: bytes) -> None:
    with pytest.raises(InstantMetadataError, match=r"\.hoodie/1\.rollback"):
        deserialize(data, "HoodieRollbackMetadata", ".hoodie/1.rollback")


def test_every_truncation_raises() -> None:
    data = serialize("HoodieRollbackPlan", SAMPLES["HoodieRollbackPlan"])
    for cut in range(len(data)):
        with pytest.raises(InstantMetadataError, match="where-it-was"):
            deserialize(data[:cut], "HoodieRollbackPlan", "where-it-was")


def test_bad_sync_marker_raises() -> None:
    data = serialize("HoodieRollbackPlan", SAMPLES["HoodieRollbackPlan"])
    with pytest.raises(InstantMetadataError, match="plan-file"):
        deserialize(data[:-16] + b"\x00" * 16, "HoodieRollbackPlan", "plan-file")


def test_trailing_garbage_raises() -> None:
    data = serialize("HoodieRollbackPlan", SAMPLES["HoodieRollbackPlan"])
    with pytest.raises(InstantMetadataError, match="plan-file"):
        deserialize(data + b"\x07garbage", "HoodieRollbackPlan", "plan-file")


def test_wrong_record_type_raises() -> None:
    data = serialize("HoodieRollbackPlan", SAMPLES["HoodieRollbackPlan"])
    with pytest.raises(
        InstantMetadataError, match=r"c\.compaction\.requested.*HoodieRollbackPlan.*HoodieCompactionPlan"
    ):
        deserialize(data, "HoodieCompactionPlan", "c.compaction.requested")


def test_two_records_raise() -> None:
    buf = io.BytesIO()
    record = SAMPLES["HoodieSavepointMetadata"]
    fastavro.writer(buf, am._PARSED["HoodieSavepointMetadata"], [record, record])
    with pytest.raises(InstantMetadataError, match="exactly one"):
        deserialize(buf.getvalue(), "HoodieSavepointMetadata", "s.savepoint")


def test_not_bytes_raises() -> None:
    with pytest.raises(InstantMetadataError, match="where"):
        deserialize("Obj\x01", "HoodieRollbackPlan", "where")  # type: ignore[arg-type]


def test_unknown_schema_name_raises() -> None:
    with pytest.raises(InstantMetadataError, match="HoodieNoSuchThing"):
        serialize("HoodieNoSuchThing", {})
    with pytest.raises(InstantMetadataError, match="HoodieNoSuchThing"):
        deserialize(b"Obj\x01", "HoodieNoSuchThing", "x")


# --- records that do not fit ---------------------------------------------------------------------


def test_missing_required_field_names_it() -> None:
    record = dict(SAMPLES["HoodieRollbackMetadata"])
    del record["startRollbackTime"]
    with pytest.raises(InstantMetadataError, match=r"HoodieRollbackMetadata.*startRollbackTime.*missing"):
        serialize("HoodieRollbackMetadata", record)


def test_missing_nested_required_field_names_its_path() -> None:
    record = copy.deepcopy(SAMPLES["HoodieRollbackPlan"])
    del record["RollbackRequests"][1]["partitionPath"]
    with pytest.raises(InstantMetadataError, match=r"HoodieRollbackPlan.*RollbackRequests\[1\]\.partitionPath"):
        serialize("HoodieRollbackPlan", record)


def test_unknown_field_is_refused() -> None:
    record = dict(SAMPLES["HoodieRollbackPlan"])
    record["rollbackRequests"] = record.pop("RollbackRequests")  # wrong case: Hudi spells it RollbackRequests
    with pytest.raises(InstantMetadataError, match=r"HoodieRollbackPlan.*rollbackRequests"):
        serialize("HoodieRollbackPlan", record)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("timeTakenInMillis", "12"),
        ("timeTakenInMillis", True),
        ("totalFilesDeleted", 2**31),
        ("commitsRollback", "20250126040826878"),
        ("commitsRollback", [1]),
        ("partitionMetadata", []),
        ("instantsRollback", [{"commitTime": FAILED}]),
        ("version", "1"),
    ],
)
def test_wrong_type_names_the_field(field: str, value: Any) -> None:
    record = dict(SAMPLES["HoodieRollbackMetadata"])
    record[field] = value
    with pytest.raises(InstantMetadataError, match=rf"HoodieRollbackMetadata.*{field}"):
        serialize("HoodieRollbackMetadata", record)


def test_null_for_non_nullable_field_names_it() -> None:
    record = dict(SAMPLES["HoodieCleanerPlan"])
    record["policy"] = None
    with pytest.raises(InstantMetadataError, match=r"HoodieCleanerPlan.*policy"):
        serialize("HoodieCleanerPlan", record)


def test_record_not_a_mapping() -> None:
    with pytest.raises(InstantMetadataError, match="HoodieRollbackPlan"):
        serialize("HoodieRollbackPlan", [])  # type: ignore[arg-type]


# --- schema evolution ----------------------------------------------------------------------------


def _drop_fields(schema: dict[str, Any], names: set[str]) -> dict[str, Any]:
    """A copy of ``schema`` without the named fields, at any depth (an older writer's schema)."""

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(n) for n in node]
        if isinstance(node, dict):
            out = {k: walk(v) for k, v in node.items()}
            if out.get("type") == "record":
                out["fields"] = [f for f in out["fields"] if f["name"] not in names]
            return out
        return node

    result: dict[str, Any] = walk(copy.deepcopy(schema))
    return result


def _write(schema: dict[str, Any], record: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    fastavro.writer(buf, fastavro.parse_schema(schema), [record], codec="null")
    return buf.getvalue()


def test_older_writer_without_optional_fields_gets_defaults() -> None:
    # Hudi before 0.10 wrote rollback metadata without instantsRollback / logFilesFromFailedCommit
    old = _drop_fields(am.HOODIE_ROLLBACK_METADATA, {"instantsRollback", "logFilesFromFailedCommit"})
    record = {
        "startRollbackTime": ROLLBACK,
        "timeTakenInMillis": 5,
        "totalFilesDeleted": 0,
        "commitsRollback": [FAILED],
        "partitionMetadata": {
            "p": {"partitionPath": "p", "successDeleteFiles": [], "failedDeleteFiles": [], "rollbackLogFiles": None}
        },
        "version": 1,
    }
    back = deserialize(_write(old, record), "HoodieRollbackMetadata", "old.rollback")
    assert back["instantsRollback"] == []
    assert back["partitionMetadata"]["p"]["logFilesFromFailedCommit"] is None
    assert back["commitsRollback"] == [FAILED]


def test_older_cleaner_plan_gets_empty_last_completed_commit() -> None:
    old = _drop_fields(am.HOODIE_CLEANER_PLAN, {"lastCompletedCommitTimestamp", "partitionsToBeDeleted"})
    record = {"earliestInstantToRetain": None, "policy": "KEEP_LATEST_COMMITS", "version": 2}
    back = deserialize(_write(old, record), "HoodieCleanerPlan", "old.clean.requested")
    assert back["lastCompletedCommitTimestamp"] == ""
    assert back["partitionsToBeDeleted"] is None
    assert back["policy"] == "KEEP_LATEST_COMMITS"


def test_newer_writer_with_extra_field_reads() -> None:
    # Hudi 1.x adds fields with defaults (e.g. missingSchedulePartitions); they are dropped on read
    newer = copy.deepcopy(am.HOODIE_COMPACTION_PLAN)
    newer["fields"].append(
        {"name": "missingSchedulePartitions", "type": ["null", {"type": "array", "items": "string"}], "default": None}
    )
    record = dict(SAMPLES["HoodieCompactionPlan"], missingSchedulePartitions=["p"])
    back = deserialize(_write(newer, record), "HoodieCompactionPlan", "new.compaction.requested")
    assert back == SAMPLES["HoodieCompactionPlan"]


def test_incompatible_writer_schema_raises() -> None:
    bad = copy.deepcopy(am.HOODIE_SAVEPOINT_METADATA)
    for f in bad["fields"]:
        if f["name"] == "savepointedAt":
            f["type"] = "string"
    record = dict(SAMPLES["HoodieSavepointMetadata"], savepointedAt="yesterday")
    with pytest.raises(InstantMetadataError, match=r"sp\.savepoint"):
        deserialize(_write(bad, record), "HoodieSavepointMetadata", "sp.savepoint")
