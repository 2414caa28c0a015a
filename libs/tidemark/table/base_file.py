"""Reading base files (Parquet): a file that is not readable Parquet is named in the error, with
what Arrow found wrong, instead of surfacing as Arrow's own error about a nameless buffer."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import pyarrow as pa
import pyarrow.parquet as pq

from tidemark.errors import CorruptBaseFileError
from tidemark.storage.base import SourceFile, Storage
from tidemark.table.avro_schema import with_utc_timestamps


@contextmanager
def _named(storage: Storage, path: str) -> Iterator[None]:
    try:
        yield
    except (pa.ArrowException, OSError) as e:  # Arrow's I/O errors are OSErrors
        reason = " ".join(str(e).split()) or type(e).__name__
        raise CorruptBaseFileError(f"{storage.full_uri(path)} is not a readable Parquet file: {reason}") from e


#: the footer's key-value metadata a read keeps on the table: the writer's Avro schema (which
#: timestamps are instants). Hudi's bloom filter (hundreds of KiB) and key range are a writer's
_KEPT_METADATA = (b"parquet.avro.schema", b"writer.model.name")


def read_base_file(storage: Storage, path: str, columns: Sequence[str] | None = None) -> pa.Table:
    """The base file's rows: the whole file in one read, or only ``columns`` (ranged reads).
    Timestamps come labelled UTC, whatever zone the writer's Arrow schema kept (:func:`utc_timestamps`)."""
    with _named(storage, path):
        # ParquetFile, not read_table: its dataset costs milliseconds per file, which a table of
        # thousands of small file groups paid thousands of times
        if columns is None:
            table = pq.ParquetFile(pa.BufferReader(storage.read(path))).read()
        else:
            with SourceFile(storage.open_input(path)) as f:
                table = pq.ParquetFile(f).read(columns=list(columns))
        metadata = table.schema.metadata or {}
        kept = {k: v for k, v in metadata.items() if k in _KEPT_METADATA} or None
        return with_utc_timestamps(table.replace_schema_metadata(kept))


@contextmanager
def open_base_file(storage: Storage, path: str) -> Iterator[pq.ParquetFile]:
    """The base file opened for footer and ranged reads (its schema, row count, key-value
    metadata, or a few rows); an Arrow error inside the block names the file too."""
    with _named(storage, path), SourceFile(storage.open_input(path)) as f:
        yield pq.ParquetFile(f)
