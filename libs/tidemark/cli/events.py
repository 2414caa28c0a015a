"""``tidemark events schema``: the published Avro schemas of the timeline events."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

from tidemark.errors import UsageError
from tidemark.events import EventType, dataschema, schema, schema_versions


def add_parser(subparsers: Any) -> None:
    events = subparsers.add_parser(
        "events",
        help="the timeline events published on Kafka",
        description="The timeline events tidemark publishes on Kafka (CloudEvents, Avro data): their schemas.",
    )
    events_sub = events.add_subparsers(dest="events_command", required=True, metavar="COMMAND")
    p = events_sub.add_parser(
        "schema",
        help="print the Avro schema of an event type (of every type when none is given)",
        description="Print the Avro schema (.avsc JSON) of an event type's data, the current version "
        "unless --version is given. Without TYPE, print one JSON object mapping the ce_dataschema "
        "(urn:tidemark:schema:<ce_type>:<version>) of every published version of every type to its "
        "schema: what a consumer needs to decode any event.",
    )
    p.add_argument("type", nargs="?", metavar="TYPE", help=f"a ce_type: {', '.join(EventType)}")
    p.add_argument("--version", type=int, help="a published schema version of TYPE (default: the current one)")
    p.set_defaults(run=run_schema)


def run_schema(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    if args.type is None:
        if args.version is not None:
            raise UsageError("--version needs a TYPE: each event type has its own versions")
        everything = {dataschema(t, v): schema(t, v) for t in EventType for v in schema_versions(t)}
        print(json.dumps(everything, indent=2), file=out)
        return 0
    if args.type not in set(EventType):
        raise UsageError(f"unknown event type {args.type!r}; the types are: {', '.join(EventType)}")
    type_ = EventType(args.type)
    if args.version is not None and args.version not in schema_versions(type_):
        raise UsageError(
            f"{type_} has no schema version {args.version}; "
            f"its versions are {', '.join(map(str, schema_versions(type_)))}"
        )
    print(json.dumps(schema(type_, args.version), indent=2), file=out)
    return 0
