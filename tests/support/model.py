"""A test's own model of a table: what a snapshot must hold after each operation."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from tidemark.table.avro_schema import META_FIELDS


@dataclass
class TableModel:
    key: str
    precombine: str | None
    partition: str | None
    rows: dict[tuple[Any, Any], dict[str, Any]] = field(default_factory=dict)

    def _id(self, row: dict[str, Any]) -> tuple[Any, Any]:
        return (row[self.partition] if self.partition else None, row[self.key])

    def upsert(self, batch: Iterable[dict[str, Any]]) -> None:
        for row in batch:
            current = self.rows.get(self._id(row))
            stored = None if current is None or not self.precombine else current[self.precombine]
            if stored is not None and stored > row[self.precombine]:
                continue  # an out-of-order update loses to the newer value already there (a null one is older)
            self.rows[self._id(row)] = dict(row)

    def insert(self, batch: Iterable[dict[str, Any]]) -> None:
        for row in batch:
            self.rows[self._id(row)] = dict(row)

    def delete(self, batch: Iterable[dict[str, Any]]) -> None:
        for row in batch:
            self.rows.pop(self._id(row), None)

    def insert_overwrite(self, batch: Sequence[dict[str, Any]]) -> None:
        touched = {row[self.partition] if self.partition else None for row in batch}
        self.rows = {k: v for k, v in self.rows.items() if k[0] not in touched}
        self.insert(batch)

    def sorted_rows(self) -> list[dict[str, Any]]:
        return sorted(self.rows.values(), key=lambda r: (str(r.get(self.partition or "", "")), r[self.key]))


def data_rows(table: pa.Table, key: str, partition: str | None = None) -> list[dict[str, Any]]:
    """A snapshot's rows without meta columns, sorted like :meth:`TableModel.sorted_rows`."""
    columns = [c for c in table.column_names if c not in META_FIELDS]
    rows = table.select(columns).to_pylist()
    return sorted(rows, key=lambda r: (str(r.get(partition or "", "")), r[key]))


def apache_snapshot(path: str, storage_options: dict[str, str] | None = None, as_of: str | None = None) -> pa.Table:
    """What Apache's reader (the ``hudi`` package, hudi-rs) reads from the table (as of the
    instant ``as_of``: time travel)."""
    import hudi

    builder = hudi.HudiTableBuilder.from_base_uri(path)
    if storage_options:
        builder = builder.with_storage_options(storage_options)
    options = hudi.HudiReadOptions()
    if as_of is not None:
        options = options.with_as_of_timestamp(as_of)
    batches = builder.build().read(options)
    return pa.Table.from_batches(batches) if batches else pa.table({})


def apache_incremental(path: str, begin: str, end: str | None = None) -> pa.Table:
    """Apache's reader's incremental query: the records written after ``begin`` up to ``end``."""
    import hudi

    options = hudi.HudiReadOptions().with_query_type(hudi.HudiQueryType.Incremental).with_start_timestamp(begin)
    if end is not None:
        options = options.with_end_timestamp(end)
    batches = hudi.HudiTableBuilder.from_base_uri(path).build().read(options)
    return pa.Table.from_batches(batches) if batches else pa.table({})


def hudi_s3_options(endpoint: str) -> dict[str, str]:
    """Storage options for Apache's reader to reach a moto S3 endpoint over plain HTTP."""
    return {
        "aws_endpoint_url": endpoint,
        "aws_allow_http": "true",
        "aws_access_key_id": "testing",
        "aws_secret_access_key": "testing",
        "aws_region": "us-east-1",
        "aws_virtual_hosted_style_request": "false",
    }
