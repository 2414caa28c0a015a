"""``tidemark log inspect``: what is inside a Hudi log file, block by block."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

from tidemark.cli.options import s3_options, storage_options
from tidemark.errors import InvalidLocationError, LogFormatError
from tidemark.logformat import HeaderKey, LogBlock, LogFileReader, header_name
from tidemark.reconcile import parse_block_identifier
from tidemark.storage import open_storage, split_location


def add_parser(subparsers: Any) -> None:
    log = subparsers.add_parser(
        "log", help="Hudi log files", description="Look inside a Hudi log file (inspect), block by block."
    )
    log_sub = log.add_subparsers(dest="log_command", required=True, metavar="COMMAND")
    inspect = log_sub.add_parser(
        "inspect",
        parents=[storage_options()],
        help="show every block of a log file",
        description="Show every block of a Hudi log file (local path or s3://): offset, type, "
        "format version, headers, content length, record count, and the byte range of each "
        "corrupt block.",
    )
    inspect.add_argument("path", help="the log file: a local path, file://... or s3://bucket/key")
    inspect.add_argument("--json", action="store_true", help="one JSON object per block")
    inspect.add_argument("--records", action="store_true", help="print the decoded records after each block")
    inspect.set_defaults(run=run_inspect)


def block_json(block: LogBlock) -> dict[str, Any]:
    """The ``--json`` form of a block: exactly these keys, Hudi's names for types and headers."""
    return {
        "offset": block.offset,
        "type": block.block_type.name,
        "version": block.version,
        "headers": {header_name(k): v for k, v in block.headers.items()},
        "content_length": block.content_length,
        "record_count": _record_count(block),
        "corrupt": None if block.corrupt is None else {"start": block.corrupt.start, "end": block.corrupt.end},
    }


def _record_count(block: LogBlock) -> int | None:
    try:
        return block.record_count()
    except LogFormatError:
        return None  # the content is damaged; the records line says why


def _short_header(key: int, value: str) -> str:
    if key == HeaderKey.SCHEMA:
        try:
            schema = json.loads(value)
        except ValueError:
            schema = None
        # JSON that is no record schema (a foreign or damaged writer's) is shown by its size too
        if isinstance(schema, dict) and isinstance(fields := schema.get("fields", []), list):
            return f"<avro {schema.get('type')} {schema.get('name')}, {len(fields)} fields>"
        return f"<{len(value)} chars>"
    return value


def block_line(block: LogBlock) -> str:
    if block.corrupt is not None:
        c = block.corrupt
        return f"@{block.offset:<10} CORRUPT_BLOCK  bytes {c.start}..{c.end} ({c.length} skipped): {c.reason}"
    headers = " ".join(f"{header_name(k)}={_short_header(k, v)}" for k, v in block.headers.items())
    count = _record_count(block)
    records = "" if count is None else f" records={count}"
    return (
        f"@{block.offset:<10} {block.block_type.name:<18} v{block.version} "
        f"content={block.content_length}{records}{attempt_text(block)} {headers}"
    )


def attempt_text(block: LogBlock) -> str:
    """`` attempt=A seq=S`` from the BLOCK_IDENTIFIER header (``""`` without one)."""
    raw = block.header(HeaderKey.BLOCK_IDENTIFIER)
    if raw is None:
        return ""
    parsed = parse_block_identifier(raw)
    return f" attempt={parsed.attempt} seq={parsed.sequence}" if parsed else f" attempt=? (malformed {raw!r})"


def run_inspect(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    from tidemark.cli.render import dumps

    directory, name = split_location(args.path)
    try:
        storage = open_storage(directory, s3_options(args))
    except InvalidLocationError as e:  # said of the folder: name the file the user gave
        raise InvalidLocationError(f"{args.path}: {e}") from None
    blocks = corrupt = skipped = 0
    with storage.open_input(name) as source:
        for block in LogFileReader(source).blocks():
            blocks += 1
            if block.corrupt is not None:
                corrupt += 1
                skipped += block.corrupt.length
            print(dumps(block_json(block)) if args.json else block_line(block), file=out)
            if args.records and block.corrupt is None:
                _print_records(block, args.json, out)
        if not args.json:
            print(
                f"{source.path}: {source.size} bytes, {blocks} blocks, {corrupt} corrupt ({skipped} bytes skipped)",
                file=out,
            )
    return 0


def _print_records(block: LogBlock, as_json: bool, out: TextIO) -> None:
    from tidemark.cli.render import dumps

    try:
        records = block.records()
    except LogFormatError as e:
        if as_json:
            print(dumps({"block_offset": block.offset, "error": str(e)}), file=out)
        else:
            print(f"    ! records cannot be decoded: {e}", file=out)
        return
    for record in records:
        print(
            dumps({"block_offset": block.offset, "record": record}) if as_json else f"    {dumps(record)}",
            file=out,
        )
