"""The Hudi log format (table version 6): block layout, reader, writer and file names."""

from tidemark.logformat.block import (
    MAGIC,
    BlockSpec,
    BlockType,
    CommandBlockType,
    CorruptRange,
    HeaderKey,
    LogBlock,
    header_key_from_name,
    header_name,
)
from tidemark.logformat.content import (
    DeleteRecord,
    delete_records,
    ordering_field_type,
    ordering_from_avro,
    ordering_wrapper,
)
from tidemark.logformat.file_name import BaseFileName, LogFileName, WriteToken
from tidemark.logformat.reader import LogFileReader, read_blocks
from tidemark.logformat.writer import (
    AppendResult,
    LogWriter,
    avro_data_block,
    delete_block,
    list_log_files,
    parquet_data_block,
    rollback_block,
)

__all__ = [
    "MAGIC",
    "AppendResult",
    "BaseFileName",
    "BlockSpec",
    "BlockType",
    "CommandBlockType",
    "CorruptRange",
    "DeleteRecord",
    "HeaderKey",
    "LogBlock",
    "LogFileName",
    "LogFileReader",
    "LogWriter",
    "WriteToken",
    "avro_data_block",
    "delete_block",
    "delete_records",
    "header_key_from_name",
    "header_name",
    "list_log_files",
    "ordering_field_type",
    "ordering_from_avro",
    "ordering_wrapper",
    "parquet_data_block",
    "read_blocks",
    "rollback_block",
]
