"""Where a write's new records go (Hudi's ``UpsertPartitioner``): per partition, a list of insert
buckets, each a file group and the number of the partition's inserts it takes. A record's bucket
is chosen by the hash of its key, weighted by those numbers, so every task attempt routes it alike.

Every write's new file groups hold ``hoodie.parquet.max.file.size / record size`` records
(``hoodie.copyonwrite.insert.auto.split``, on by default) or ``hoodie.copyonwrite.insert.split.size``
records; the record size is the table's average, as Hudi estimates it. Merge-On-Read writes (and
bulk_insert, insert_overwrite) start new file groups only. Copy-on-write upserts and inserts first
fill the partition's small files, as Hudi does: a latest base file smaller than
``hoodie.parquet.small.file.limit`` takes as many records as fit below
``hoodie.parquet.max.file.size`` at that record size; its file group is then rewritten with them.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass

from tidemark.config import conf_bool, conf_float, conf_int
from tidemark.logformat.file_name import LogFileName
from tidemark.storage.base import Storage
from tidemark.table.file_system_view import FileSystemView, instant_metadata
from tidemark.timeline import COMMIT, DELTA_COMMIT, REPLACE_COMMIT, Timeline

#: Hudi's defaults
INSERT_SPLIT_SIZE = 500_000
SMALL_FILE_LIMIT = 104_857_600
MAX_FILE_SIZE = 125_829_120
RECORD_SIZE_ESTIMATE = 1024
RECORD_SIZE_ESTIMATION_THRESHOLD = 1.0


@dataclass(frozen=True)
class InsertBucket:
    """A share of a partition's inserts: a new file group, or (``base_file`` set) a small file's
    group, into whose base file they are merged."""

    file_id: str
    records: int
    base_instant: str | None = None
    base_file: str | None = None


@dataclass(frozen=True)
class SmallFileConfig:
    small_file_limit: int = SMALL_FILE_LIMIT
    max_file_size: int = MAX_FILE_SIZE
    record_size_estimate: int = RECORD_SIZE_ESTIMATE
    estimation_threshold: float = RECORD_SIZE_ESTIMATION_THRESHOLD
    auto_split: bool = True
    split_size: int = INSERT_SPLIT_SIZE

    @classmethod
    def from_conf(cls, conf: Mapping[str, str]) -> SmallFileConfig:
        """The sizing settings, each bad value refused with its key and value. A small-file limit
        of 0 turns small-file filling off; sizes and the split size count at least 1."""
        return cls(
            small_file_limit=conf_int(conf, "hoodie.parquet.small.file.limit", SMALL_FILE_LIMIT, least=0),
            max_file_size=conf_int(conf, "hoodie.parquet.max.file.size", MAX_FILE_SIZE, least=1),
            record_size_estimate=conf_int(
                conf, "hoodie.copyonwrite.record.size.estimate", RECORD_SIZE_ESTIMATE, least=1
            ),
            estimation_threshold=conf_float(
                conf, "hoodie.record.size.estimation.threshold", RECORD_SIZE_ESTIMATION_THRESHOLD, least=0.0
            ),
            auto_split=conf_bool(conf, "hoodie.copyonwrite.insert.auto.split", default=True),
            split_size=conf_int(conf, "hoodie.copyonwrite.insert.split.size", INSERT_SPLIT_SIZE, least=1),
        )


def new_file_id(instant: str, partition: str, number: int) -> str:
    """The id of a write's ``number``-th new file group in ``partition``: derived, not random, so
    every task attempt names it alike; shaped as Hudi's (a UUID and ``-0``)."""
    digest = hashlib.md5(f"{instant}/{partition}/{number}".encode(), usedforsecurity=False).hexdigest()
    return f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}-0"


def new_file_groups(partition: str, count: int, per_group: int, instant: str) -> list[InsertBucket]:
    """``ceil(count / per_group)`` new file groups sharing ``count`` records evenly."""
    n = max(1, math.ceil(count / max(1, per_group)))
    return [
        InsertBucket(new_file_id(instant, partition, i), count // n + (1 if i < count % n else 0)) for i in range(n)
    ]


def average_record_size(storage: Storage, timeline: Timeline, config: SmallFileConfig) -> int:
    """Bytes per record of the latest commit that wrote more than the estimation threshold (as
    Hudi 0.15 estimates it: of a deltacommit, only its base files count, a log block's size says
    little of a base file's), else ``hoodie.copyonwrite.record.size.estimate``."""
    threshold = config.estimation_threshold * config.small_file_limit
    for instant in reversed(timeline.completed().of_actions(COMMIT, REPLACE_COMMIT, DELTA_COMMIT).instants):
        stats = instant_metadata(storage, instant).write_stats()
        if instant.action == DELTA_COMMIT:
            stats = [s for s in stats if s.path and not LogFileName.is_log_file(s.path)]
        written = sum(s.total_write_bytes for s in stats)
        records = sum(s.num_writes for s in stats)
        if written > threshold and records > 0:
            return max(1, math.ceil(written / records))
    return config.record_size_estimate


def insert_buckets(
    storage: Storage,
    timeline: Timeline,
    counts: Mapping[str, int],
    config: SmallFileConfig,
    instant: str,
    fill_small_files: bool,
) -> dict[str, list[InsertBucket]]:
    """Insert buckets of a write with ``counts`` new records per partition: the partition's small
    files first (``fill_small_files``: a copy-on-write upsert or insert), then new file groups."""
    record_size = average_record_size(storage, timeline, config)
    per_group = max(1, config.max_file_size // record_size) if config.auto_split else config.split_size
    view = FileSystemView(storage, timeline) if fill_small_files and config.small_file_limit > 0 else None
    result: dict[str, list[InsertBucket]] = {}
    for partition, count in sorted(counts.items()):
        buckets: list[InsertBucket] = []
        remaining = count
        if view is not None and partition in view.partitions:
            groups = [g.latest_slice() for g in view.file_groups(partition)]
            small = sorted(
                (fs for fs in groups if fs is not None and fs.base_file is not None and not fs.log_files),
                key=lambda fs: (fs.base_file.size if fs.base_file else 0, fs.file_id),
            )
            for fs in small:
                assert fs.base_file is not None
                if remaining <= 0 or fs.base_file.size >= config.small_file_limit:
                    continue
                room = (config.max_file_size - fs.base_file.size) // record_size
                take = min(room, remaining)
                if take > 0:
                    buckets.append(InsertBucket(fs.file_id, take, fs.base_instant, fs.base_file.path))
                    remaining -= take
        if remaining > 0:
            buckets.extend(new_file_groups(partition, remaining, per_group, instant))
        result[partition] = buckets
    return result
