"""Options shared by the commands."""

from __future__ import annotations

import argparse
import re
import sys
from typing import TextIO

from tidemark.config import kafka_brokers
from tidemark.errors import TidemarkError
from tidemark.storage import S3Options, Storage, open_storage
from tidemark.table.metadata_table import (
    METADATA_FOLDER,
    check_change,
    disable_requested,
    listed_partitions,
    prepare_table_change,
)
from tidemark.table.properties import read_properties


def storage_options() -> argparse.ArgumentParser:
    """A parent parser: ``--s3-endpoint``, ``--s3-region`` and ``--conf``, accepted after the
    subcommand."""
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group("storage and configuration")
    group.add_argument(
        "--s3-endpoint",
        metavar="URL",
        default=None,
        help="S3-compatible endpoint for s3:// locations (default: $TIDEMARK_S3_ENDPOINT, else AWS)",
    )
    group.add_argument("--s3-region", metavar="REGION", default=None, help="S3 region (default: boto3's)")
    group.add_argument(
        "--conf",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        type=conf_pair,
        help="a Hudi configuration key (e.g. hoodie.copyonwrite.insert.split.size=100000); repeatable",
    )
    return parent


def add_table_path(parser: argparse.ArgumentParser) -> None:
    """The positional ``path`` of every command that opens a table, described in one place."""
    parser.add_argument("path", help="the table: a local path, file://PATH or s3://bucket/prefix")


#: The dotted key a malformed ``--conf`` starts with (``tidemark.kafka.sasl.password:...``).
_LEADING_KEY = re.compile(r"[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)+")


def conf_pair(text: str) -> tuple[str, str]:
    """``KEY=VALUE`` from ``--conf`` (shared by the CLI and the services). A malformed one is
    refused naming at most its leading dotted key, never the rest: the error goes to the
    container's log, and the rest may be a password (``KEY:VALUE``)."""
    key, sep, value = text.partition("=")
    if not key.strip():
        raise argparse.ArgumentTypeError("--conf wants KEY=VALUE, got no key before '='")
    if not sep:
        leading = _LEADING_KEY.match(text.strip())
        got = f"{leading.group()!r} and " if leading else ""
        raise argparse.ArgumentTypeError(
            f"--conf wants KEY=VALUE, got {got}no '=' (the rest is not shown: it may be a secret)"
        )
    return key.strip(), value.strip()


def port_number(text: str) -> int:
    """A TCP port from a flag or its environment variable (argparse converts string defaults too,
    so a bad variable is told as the flag's error, not a traceback)."""
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (0 to 65535; from the flag or its variable)")
    return port


def bootstrap_list(text: str) -> str:
    """``--bootstrap HOST:PORT[,HOST:PORT...]``, checked (:func:`tidemark.config.kafka_brokers`) as
    :func:`port_number` checks a port: from the flag or its environment variable."""
    try:
        kafka_brokers(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{e} (from the flag or its variable)") from None
    return text.strip()


def conf(args: argparse.Namespace) -> dict[str, str]:
    return dict(args.conf)


def s3_options(args: argparse.Namespace) -> S3Options:
    return S3Options(endpoint_url=args.s3_endpoint, region=args.s3_region)


def counted(count: int, noun: str) -> str:
    """``count`` and ``noun``, plural unless one ("1 file", "3 files", "0 rollback blocks")."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def open_table(
    args: argparse.Namespace, command: str | None = None, dry_run: bool = False, out: TextIO = sys.stdout
) -> Storage:
    """The table; for a ``command`` that changes it, with its metadata table disabled first when
    ``--conf hoodie.metadata.enable=false`` says so (else such a table is refused). A ``dry_run``
    changes nothing and goes on, but says that the real run would be refused, or would disable the
    metadata table first: it printed a plan the real run then refused to carry out."""
    storage = open_storage(args.path, s3_options(args))
    props = read_properties(storage)  # a clear error when the path is not a table
    if command is None:
        return storage
    settings = conf(args)
    if not dry_run:
        prepare_table_change(storage, settings, command, writes_rows=False)  # none of these writes rows
        return storage
    try:
        check_change(storage, settings, command, writes_rows=False)
    except TidemarkError as e:
        print(f"the real run would be refused: {e}", file=out)
        return storage
    if disable_requested(settings) and (listed_partitions(props) or any(storage.list(f"{METADATA_FOLDER}/"))):
        print(
            f"would first disable the metadata table ({METADATA_FOLDER}/): clear its partitions from "
            "hoodie.properties, then delete the folder",
            file=out,
        )
    return storage
