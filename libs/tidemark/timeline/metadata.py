"""Commit metadata as Hudi writes it: JSON for commit, deltacommit and replacecommit."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tidemark.errors import InstantMetadataError


@dataclass(frozen=True)
class WriteStat:
    """One file written by a commit (Hudi's ``HoodieWriteStat`` / ``HoodieDeltaWriteStat``)."""

    file_id: str
    path: str | None
    partition_path: str | None
    prev_commit: str | None = None
    num_writes: int = 0
    num_deletes: int = 0
    num_update_writes: int = 0
    num_inserts: int = 0
    total_write_bytes: int = 0
    file_size: int = 0
    base_file: str | None = None
    log_files: tuple[str, ...] = ()
    log_version: int | None = None
    log_offset: int | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> WriteStat:
        known = {
            "fileId", "path", "partitionPath", "prevCommit", "numWrites", "numDeletes", "numUpdateWrites",
            "numInserts", "totalWriteBytes", "fileSizeInBytes", "baseFile", "logFiles", "logVersion", "logOffset",
        }  # fmt: skip
        prev = obj.get("prevCommit")
        return cls(
            file_id=obj.get("fileId") or "",
            path=obj.get("path"),
            partition_path=obj.get("partitionPath"),
            prev_commit=None if prev in (None, "null") else str(prev),
            num_writes=int(obj.get("numWrites") or 0),
            num_deletes=int(obj.get("numDeletes") or 0),
            num_update_writes=int(obj.get("numUpdateWrites") or 0),
            num_inserts=int(obj.get("numInserts") or 0),
            total_write_bytes=int(obj.get("totalWriteBytes") or 0),
            file_size=int(obj.get("fileSizeInBytes") or 0),
            base_file=obj.get("baseFile"),
            log_files=tuple(obj.get("logFiles") or ()),
            log_version=obj.get("logVersion"),
            log_offset=obj.get("logOffset"),
            extra={k: v for k, v in obj.items() if k not in known},
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "fileId": self.file_id,
            "path": self.path,
            "prevCommit": self.prev_commit or "null",
            "numWrites": self.num_writes,
            "numDeletes": self.num_deletes,
            "numUpdateWrites": self.num_update_writes,
            "numInserts": self.num_inserts,
            "totalWriteBytes": self.total_write_bytes,
            "totalWriteErrors": 0,
            "partitionPath": self.partition_path,
            "fileSizeInBytes": self.file_size,
        }
        if self.log_files or self.base_file is not None:
            out["logVersion"] = self.log_version
            out["logOffset"] = self.log_offset
            out["baseFile"] = self.base_file
            out["logFiles"] = list(self.log_files)
        out.update(self.extra)
        return out


def _file_ids(ids: Any) -> tuple[str, ...]:
    # a string would pass as a sequence of one-letter file ids
    if ids is not None and (not isinstance(ids, list) or not all(isinstance(i, str) for i in ids)):
        raise TypeError(f"partitionToReplaceFileIds holds {ids!r}, not a list of file ids")
    return tuple(ids or ())


@dataclass(frozen=True)
class CommitMetadata:
    """Hudi's ``HoodieCommitMetadata`` (and ``HoodieReplaceCommitMetadata``) as JSON."""

    partition_to_write_stats: Mapping[str, tuple[WriteStat, ...]] = field(default_factory=dict)
    partition_to_replace_file_ids: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    compacted: bool = False
    extra_metadata: Mapping[str, str] = field(default_factory=dict)
    operation_type: str | None = None

    @property
    def schema(self) -> str | None:
        return self.extra_metadata.get("schema")

    def write_stats(self) -> list[WriteStat]:
        return [s for stats in self.partition_to_write_stats.values() for s in stats]

    @classmethod
    def from_bytes(cls, data: bytes, where: str = "commit metadata") -> CommitMetadata:
        if not data.strip():
            return cls()
        try:
            obj = json.loads(data)
        except (ValueError, UnicodeDecodeError) as e:
            raise InstantMetadataError(f"{where} is not JSON: {e}") from e
        if not isinstance(obj, dict):
            raise InstantMetadataError(f"{where} is not a JSON object")
        return cls.from_json(obj, where)

    @classmethod
    def from_json(cls, obj: Mapping[str, Any], where: str = "commit metadata") -> CommitMetadata:
        """From the decoded JSON object, or the Avro record an archived instant carries (its
        fields have the same names)."""
        try:
            stats = {
                p: tuple(WriteStat.from_json(s) for s in (lst or ()))
                for p, lst in (obj.get("partitionToWriteStats") or {}).items()
            }
            replaced = {p: _file_ids(ids) for p, ids in (obj.get("partitionToReplaceFileIds") or {}).items()}
            return cls(
                partition_to_write_stats=stats,
                partition_to_replace_file_ids=replaced,
                compacted=bool(obj.get("compacted", False)),
                extra_metadata=dict(obj.get("extraMetadata") or {}),
                operation_type=obj.get("operationType"),
            )
        except (AttributeError, TypeError, ValueError) as e:
            raise InstantMetadataError(f"{where} does not have Hudi's commit metadata shape: {e}") from e

    def to_bytes(self) -> bytes:
        obj: dict[str, Any] = {
            "partitionToWriteStats": {p: [s.to_json() for s in st] for p, st in self.partition_to_write_stats.items()},
            "compacted": self.compacted,
            "extraMetadata": dict(self.extra_metadata),
            "operationType": self.operation_type,
        }
        if self.partition_to_replace_file_ids:
            obj["partitionToReplaceFileIds"] = {p: list(ids) for p, ids in self.partition_to_replace_file_ids.items()}
        return json.dumps(obj, indent=2).encode()
