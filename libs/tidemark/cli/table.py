"""Table commands: write, table read/show, timeline, compact, rollback."""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from tidemark.cli.options import add_table_path, conf, counted, open_table, s3_options, storage_options
from tidemark.cli.render import dumps
from tidemark.config import comma_fields
from tidemark.errors import MissingExtraError, TableError, UsageError
from tidemark.logformat import HeaderKey, LogFileReader
from tidemark.storage import LocalStorage, Storage, canonical_location, open_storage
from tidemark.table.avro_schema import META_FIELDS, arrow_schema_of, latest_table_schema, plain_rows
from tidemark.table.concurrency import ConcurrencyConfig
from tidemark.table.conflict import pending_clusterings
from tidemark.table.file_system_view import FileSlice
from tidemark.table.heartbeat import HeartbeatStatus, compaction_status, heartbeat_status
from tidemark.table.incremental import FAIL, HOLES_POLICY, RangeNames, read_incremental
from tidemark.table.metadata_table import (
    check_changeable,
    disable_requested,
    prepare_table_change,
    type_contradiction,
)
from tidemark.table.metadata_table import describe as describe_metadata_table
from tidemark.table.properties import COPY_ON_WRITE, TABLE_TYPE, find_properties, read_properties
from tidemark.table.snapshot import SnapshotReader, read_snapshot, resolve_as_of
from tidemark.table.write_client import (
    RollbackPreview,
    TableSettings,
    UnfinishedRestore,
    check_can_hold_a_table,
    resolve_table_settings,
    unfinished_restore,
)
from tidemark.timeline import COMPACTION, load_timeline
from tidemark.timeline.instant import WRITE_ACTIONS


def add_parsers(sub: Any) -> None:
    common = [storage_options()]
    w = sub.add_parser(
        "write",
        parents=common,
        help="write a JSON-lines or Parquet file to a Hudi table (local Spark)",
        description="Write records to a Hudi table (Merge-On-Read or Copy-On-Write); the table is created on "
        "first write, Merge-On-Read unless --table-type says otherwise. Writing "
        "into an existing table takes its record key, precombine and partition fields, hive-style and URL-encoding "
        "flags, key generator and payload from its hoodie.properties: flags may restate them, not change them.",
    )
    add_table_path(w)
    w.add_argument("--input", required=True, help="JSON lines (.json/.jsonl) or Parquet (.parquet) file or folder")
    w.add_argument(
        "--operation",
        required=True,
        choices=["upsert", "insert", "bulk_insert", "delete", "insert_overwrite", "merge_update"],
        help="the write operation, as Hudi's; merge_update: set columns of the rows whose keys --input lists "
        "to --set expressions",
    )
    w.add_argument(
        "--set",
        metavar="COL=EXPR",
        action="append",
        default=[],
        type=_set_pair,
        help="for merge_update: a column and an expression of the row's current values (fare='fare * 2')",
    )
    w.add_argument(
        "--record-key", help="record key column(s), comma separated (required to create a table; default: the table's)"
    )
    w.add_argument("--precombine", help="ordering column: the larger value wins for one key (default: the table's)")
    w.add_argument(
        "--partition-field",
        help="partition column(s), comma separated; field:SIMPLE|TIMESTAMP for a CustomKeyGenerator "
        "(default: the table's)",
    )
    w.add_argument(
        "--hive-style", action="store_true", default=None, help="partition folders as field=value (a new table)"
    )
    w.add_argument("--table-name", help="table name for a new table (default: the folder name)")
    w.add_argument(
        "--table-type",
        choices=["MERGE_ON_READ", "COPY_ON_WRITE"],
        type=str.upper,
        help="a new table's type (default MERGE_ON_READ; Hudi's hoodie.datasource.write.table.type); "
        "an existing table's may only be restated",
    )
    w.set_defaults(run=run_write)

    t = sub.add_parser(
        "table",
        help="read or describe a table",
        description="Read a table's rows (read) or describe its properties, file groups and file slices (show).",
    )
    tsub = t.add_subparsers(dest="table_command", required=True, metavar="COMMAND")
    r = tsub.add_parser(
        "read",
        parents=common,
        help="print the table's snapshot",
        description="Print the table's rows as its latest completed writes left them (each file slice's base file "
        "merged with its log blocks), without Hudi's meta columns. --as-of reads the table as of an earlier "
        "instant (time travel); --begin runs an incremental query instead.",
    )
    add_table_path(r)
    r.add_argument(
        "--as-of",
        metavar="TIME",
        help="time travel: the table as of an instant time or yyyy-MM-dd[ HH:mm:ss[.SSS]] (its latest write then)",
    )
    r.add_argument(
        "--begin",
        metavar="INSTANT",
        help="an incremental query: the records the commits after INSTANT wrote (000: from the start), "
        "each at its latest value; a pending write older than the range's end stops it unless "
        "--conf hoodie.read.timeline.holes.resolution.policy=BLOCK",
    )
    r.add_argument("--end", metavar="INSTANT", help="with --begin: the last instant of the range (default: the latest)")
    r.add_argument(
        "--format",
        choices=["jsonl", "table"],
        default="table",
        help="table (default): aligned columns and a row count; jsonl: one JSON object per row",
    )
    r.set_defaults(run=run_read)
    s = tsub.add_parser(
        "show",
        parents=common,
        help="properties, partitions, file groups and slices",
        description="Describe a table: its hoodie.properties, its metadata table if it has one, and per "
        "partition its file groups, with each file slice's base file, log files and pending compaction.",
    )
    add_table_path(s)
    s.add_argument(
        "--log-blocks",
        action="store_true",
        help="list every log block of the latest file slices, marking those a read skips and why",
    )
    s.add_argument(
        "--footers",
        action="store_true",
        help="read each base file's footer: whether it has Hudi's record key bloom filter, which "
        "Apache writers with a BLOOM index need",
    )
    s.set_defaults(run=run_show)

    tl = sub.add_parser(
        "timeline",
        parents=common,
        help="the table's active timeline",
        description="List the instants of the table's active timeline, oldest first: time, action and state. "
        "A pending write shows its writer's heartbeat, live or expired (the next write rolls back a write "
        "whose heartbeat has expired), a pending compaction its runner's (the next compact takes over one "
        "whose heartbeat has expired); a pending clustering Apache Hudi planned is marked as such.",
    )
    add_table_path(tl)
    tl.add_argument(
        "--json",
        action="store_true",
        help="one JSON object per instant (instant, action, state; a pending write's or compaction's heartbeat, "
        "a clustering's "
        "file groups)",
    )
    tl.add_argument(
        "--archived",
        action="store_true",
        help="the archived timeline (.hoodie/<hoodie.archivelog.folder>/, archived/ by default) instead",
    )
    tl.set_defaults(run=run_timeline)

    c = sub.add_parser(
        "compact",
        parents=common,
        help="schedule and run a compaction",
        description="Compact a Merge-On-Read table: every latest file slice with log files is merged into a new "
        "base file, under a compaction instant. A pending compaction (one that failed or was interrupted) "
        "is finished first, and so is a rollback that stopped half-way; then a new compaction is planned "
        "and run.",
    )
    add_table_path(c)
    c.add_argument(
        "--engine",
        choices=["spark", "local"],
        default="spark",
        help="spark (default): each file slice merged by a Spark task (--conf spark.master=..., else "
        "$TIDEMARK_SPARK_MASTER, else local[2]); local: all in this process, for small tables",
    )
    c.set_defaults(run=run_compact)

    rb = sub.add_parser(
        "rollback",
        parents=common,
        help="roll back a pending or the latest completed write",
        description="Roll back one write instant: a pending one (another writer's only once its heartbeat has "
        "expired), or the latest completed one; an older completed write is refused (restore to a savepoint "
        "instead). The files only that write wrote are deleted, and rollback blocks appended to log files it "
        "shares with other writes, under a rollback instant. A rollback that stopped half-way is finished "
        "by running the same command again. --dry-run prints what it would delete and mark, and changes nothing.",
    )
    add_table_path(rb)
    rb.add_argument("instant", help="the write instant to roll back (its time, as tidemark timeline lists it)")
    rb.add_argument("--dry-run", action="store_true", help="print the files it would delete and mark, change nothing")
    rb.set_defaults(run=run_rollback)


def _set_pair(text: str) -> tuple[str, str]:
    column, sep, expression = text.partition("=")
    if not sep or not column.strip() or not expression.strip():
        raise argparse.ArgumentTypeError(f"--set wants COLUMN=EXPRESSION, got {text!r}")
    return column.strip(), expression.strip()


def run_write(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    try:
        from tidemark.spark.interrupts import spark_interrupts
        from tidemark.spark.session import local_session
        from tidemark.spark.write_job import WriteOptions, check_write_settings, write_dataframe
    except ModuleNotFoundError as e:
        raise MissingExtraError("tidemark write (a Spark job)", e.name, "spark") from None

    if args.operation == "merge_update" and not args.set:
        raise UsageError("merge_update needs --set COL=EXPR (at least one column expression, e.g. fare='fare * 2')")
    if args.set and args.operation != "merge_update":  # else the expressions would be ignored unseen
        raise UsageError(f"--set is merge_update's: --operation {args.operation} writes the input's values")
    source = Path(args.input)
    if not source.exists():
        raise TableError(f"--input {args.input}: no such file or folder")
    settings = conf(args)
    options = WriteOptions(
        operation=args.operation,
        record_key=comma_fields(args.record_key) or (),
        precombine=args.precombine,
        partition_fields=comma_fields(args.partition_field),
        hive_style=args.hive_style,
        table_name=args.table_name,
        table_type=args.table_type,
        conf=settings,
        set_expressions=dict(args.set),
    )
    check_write_settings(options)
    # what can be refused without Spark is refused before it starts (the write job checks again)
    storage = open_storage(args.path, s3_options(args))
    existing = find_properties(storage)
    if existing is None:
        _check_can_hold_a_table(storage)
    if existing is not None and not disable_requested(settings):
        check_changeable(storage, "write", existing)
    resolve_table_settings(
        storage.uri,
        existing,
        TableSettings.from_conf(
            settings,
            comma_fields(args.record_key) or (),
            args.precombine,
            comma_fields(args.partition_field),
            args.hive_style,
            table_type=args.table_type,
        ),
    )
    spark = local_session(conf=settings)  # its spark.* keys: the session's settings
    # the input's reading runs Spark jobs too: a Ctrl-C in them cancels them as one in the write's
    with spark_interrupts(spark):
        suffix = source.suffix.lower() if source.is_file() else ""
        # JSON into an existing table is read with the table's own types (JSON alone would infer long,
        # double and string); a new table's types are what JSON infers
        table_schema = latest_table_schema(storage) if existing is not None else None
        try:
            if suffix == ".parquet" or (source.is_dir() and any(source.glob("*.parquet"))):
                df = spark.read.parquet(str(source))
            elif table_schema is not None:
                from tidemark.spark.json_input import read_typed_json

                df = read_typed_json(spark, str(source), arrow_schema_of(table_schema), f"--input {args.input}")
            else:
                from tidemark.spark.json_input import read_new_table_json

                df = read_new_table_json(spark, str(source), f"--input {args.input}")
        except TableError:
            raise
        except Exception as e:  # Spark's own parse errors
            raise TableError(f"--input {args.input} cannot be read: {str(e).splitlines()[0]}") from e
        result = write_dataframe(df, args.path, options, s3_options(args))
        # said within the block: a Ctrl-C now is one after the commit (PySpark's own handler,
        # back after it, would end the command as interrupted, its write said rolled back)
        print(
            f"{args.operation} committed at {result.instant}: {result.inserts} inserted, {result.updates} updated, "
            f"{result.deletes} deleted in {counted(result.files_written, 'file')}",
            file=out,
        )
        for partition, groups in result.replaced_file_groups.items():
            where = partition or "(the table's root)"
            print(f"replaced {counted(len(groups), 'file group')} of partition {where}: their rows are gone", file=out)
        for instant in result.rolled_back:
            print(f"rolled back the failed write {instant} first", file=out)
    return 0


def _check_can_hold_a_table(storage: Storage) -> None:
    # a local path that is (or lies under) a file, or one inside another table: told now, not
    # after Spark's start
    if isinstance(storage, LocalStorage):
        for folder in (storage.root, *storage.root.parents):
            if folder.exists():
                if not folder.is_dir():
                    raise TableError(f"{storage.uri}: cannot create a table there: {folder} is a file")
                break
    check_can_hold_a_table(storage)


def run_read(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    storage = open_storage(args.path, s3_options(args))
    if args.begin is None:
        if args.end is not None:
            raise UsageError("--end ends an incremental query: give --begin too")
        as_of = resolve_as_of(storage, load_timeline(storage), args.as_of, "--as-of") if args.as_of else None
        table = read_snapshot(storage, as_of)
    else:
        if args.as_of is not None:
            raise UsageError("--as-of is a snapshot's: an incremental query (--begin) ends at --end")
        policy = conf(args).get(HOLES_POLICY) or FAIL
        table = read_incremental(storage, args.begin, args.end, policy, RangeNames("--begin", "--end", HOLES_POLICY))
    data = [c for c in table.column_names if c not in META_FIELDS]
    rows = plain_rows(table.select(data))
    if args.format == "jsonl":
        for row in rows:
            print(dumps(row), file=out)
        return 0
    widths = {c: max([len(c)] + [len(_cell(r[c])) for r in rows]) for c in data}
    if data:  # an empty table or range may have no columns at all
        print("  ".join(c.ljust(widths[c]) for c in data), file=out)
    for row in rows:
        print("  ".join(_cell(row[c]).ljust(widths[c]) for c in data), file=out)
    print(f"({counted(len(rows), 'row')})", file=out)
    return 0


def _cell(value: Any) -> str:
    rendered = dumps(value)
    return rendered[1:-1] if rendered.startswith('"') else rendered


def run_show(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    storage = open_storage(args.path, s3_options(args))
    props = read_properties(storage)
    wrong = type_contradiction(storage, props)
    print(f"table {props.name} ({_type_text(props, wrong)}) at {storage.uri}", file=out)
    if wrong:
        print(f"warning: {wrong}; {_READ_AS_TIMELINE_SAYS}", file=out)
    for key in sorted(props):
        if key != "hoodie.table.create.schema":
            print(f"  {key}={props[key]}", file=out)
    metadata = describe_metadata_table(storage, props)
    if metadata:
        print(metadata, file=out)
    config = ConcurrencyConfig.from_conf(conf(args))
    reader = SnapshotReader(storage, properties=props, reads_rows=False)  # slices and blocks, no rows
    view = reader.view
    restore = unfinished_restore(storage, reader.timeline)
    without_filter: list[str] = []
    base_files = 0
    print(f"partitions: {len(view.partitions)}", file=out)
    for partition in view.partitions:
        groups = view.file_groups(partition)
        print(f"  {partition or '(root)'}: {counted(len(groups), 'file group')}", file=out)
        for group in groups:
            print(f"    file group {group.file_id}", file=out)
            for fs in group.slices:
                base = fs.base_file.path.rsplit("/", 1)[-1] if fs.base_file else "(no base file)"
                pending = ""
                if fs.pending_compaction:
                    runner = compaction_status(storage, fs.pending_compaction, config)
                    pending = f" [compaction {fs.pending_compaction} pending, {_runner_text(runner, restore)}]"
                print(f"      slice {fs.base_instant}: {base}{pending}", file=out)
                if args.footers and fs.base_file is not None:
                    base_files += 1
                    described = _describe_footer(storage, fs.base_file.path)
                    if described is None:
                        without_filter.append(fs.base_file.path)
                    print(f"        footer: {described or 'no bloom filter'}", file=out)
                for log in fs.log_files:
                    print(f"        {log.path.rsplit('/', 1)[-1]} ({log.size} bytes)", file=out)
            # a slice without log files has no blocks to list: no heading over nothing
            if args.log_blocks and group.slices and group.slices[-1].log_files:
                _print_log_blocks(reader, group.slices[-1], out)
    if args.footers:
        print(f"base files without Hudi's bloom filter: {len(without_filter)} of {base_files}", file=out)
        if without_filter:
            print(
                "  an Apache writer with hoodie.index.type=BLOOM or GLOBAL_BLOOM fails on them until they are "
                "rewritten (tidemark compact rewrites the file slices that have log files)",
                file=out,
            )
    if args.log_blocks:
        st = reader.stats
        print(
            f"log blocks: {st.log_blocks_read} read, {st.reconciled_blocks} skipped by reconciliation, "
            f"{st.corrupt_blocks} corrupt, {st.uncommitted_blocks} uncommitted, {st.rolled_back_blocks} rolled back",
            file=out,
        )
        for problem in reader.problems:
            print(f"warning: {problem}", file=out)
    return 0


def _runner_text(runner: HeartbeatStatus, restore: UnfinishedRestore | None) -> str:
    """A pending write's heartbeat or compaction's runner as ``timeline`` and ``table show`` tell it: a
    compaction no process runs waits for an unfinished restore (``tidemark compact`` refuses until then)."""
    return runner.describe(f"{restore} is unfinished: {restore.advice}" if restore is not None else None)


def _describe_footer(storage: Storage, path: str) -> str | None:
    """A base file's bloom filter and key range as its footer holds them (a ranged read of the
    footer only); None when it has no filter."""
    from tidemark.table.base_file import open_base_file
    from tidemark.table.bloom_filter import (
        BLOOM_FILTER_KEY,
        BLOOM_FILTER_TYPE_CODE_KEY,
        MAX_RECORD_KEY,
        MIN_RECORD_KEY,
    )

    with open_base_file(storage, path) as f:
        footer = {k.decode(): v.decode() for k, v in (f.metadata.metadata or {}).items()}
    if BLOOM_FILTER_KEY not in footer:
        return None
    kind = footer.get(BLOOM_FILTER_TYPE_CODE_KEY, "SIMPLE")
    keys = f", keys {footer[MIN_RECORD_KEY]} .. {footer[MAX_RECORD_KEY]}" if MIN_RECORD_KEY in footer else ""
    return f"bloom filter {kind}{keys}"


def _print_log_blocks(reader: SnapshotReader, fs: FileSlice, out: TextIO) -> None:
    from tidemark.cli.log import attempt_text

    kept, skipped = reader.slice_blocks(fs)
    verdicts = {(sb.log_file, sb.block.offset): "read" for sb in kept}
    verdicts.update({(sk.log_file, sk.block.offset): f"SKIPPED: {sk.reason}" for sk in skipped})
    print("        log blocks of the latest slice:", file=out)
    for log in fs.log_files:
        name = log.path.rsplit("/", 1)[-1]
        with reader.listed_file(), reader.storage.open_input(log.path) as source:
            for block in LogFileReader(source).blocks():
                verdict = verdicts.get((name, block.offset))
                if verdict is None:
                    target = block.header(HeaderKey.TARGET_INSTANT_TIME)
                    verdict = f"rollback of {target}" if block.is_rollback else "command"
                print(
                    f"          {name} @{block.offset} {block.block_type.name} {block.instant_time or ''}"
                    f"{attempt_text(block)}: {verdict}",
                    file=out,
                )


#: what tidemark does with a table whose properties name the wrong type (see type_contradiction)
_READ_AS_TIMELINE_SAYS = (
    "tidemark reads it as its timeline says, merging the log files as for MERGE_ON_READ, and refuses every "
    "command that would change it until that file says hoodie.table.type=MERGE_ON_READ"
)


def _type_text(props: Mapping[str, str], wrong: str | None) -> str:
    if wrong:
        return "type contradicted by the timeline: see the warning"
    if TABLE_TYPE not in props:
        return f"{COPY_ON_WRITE}: no {TABLE_TYPE}, Hudi's default"
    return props[TABLE_TYPE]


def run_timeline(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    storage = open_storage(args.path, s3_options(args))
    props = read_properties(storage)  # a clear error when the path is not a table
    if args.archived:
        from tidemark.timeline.archived import scan_archive

        scan = scan_archive(storage, props.archive_folder)
        for entry in scan.instants:
            if args.json:
                record = {"instant": entry.timestamp, "action": entry.action, "state": entry.state.name}
                print(json.dumps(record), file=out)
            else:
                print(f"{entry.timestamp}  {entry.action:<14} {entry.state.name}", file=out)
        # a damaged archive is told, not passed off as a shorter history
        for skipped in scan.skipped:
            print(
                f"warning: {storage.full_uri(skipped.path)} bytes {skipped.offset}..{skipped.end} hold no readable "
                f"archived instants ({skipped.reason}): the history listed above misses them",
                file=sys.stderr,
            )
        return 0
    config = ConcurrencyConfig.from_conf(conf(args))
    timeline = load_timeline(storage)
    wrong = type_contradiction(storage, props, timeline)
    if wrong:  # on stderr: the listing (JSON lines with --json) stays as it is
        print(f"warning: {wrong}; {_READ_AS_TIMELINE_SAYS}", file=sys.stderr)
    clusterings = pending_clusterings(storage, timeline)
    restore = unfinished_restore(storage, timeline)
    for instant in timeline:
        clustering = instant.timestamp in clusterings
        # a pending write shows its writer's heartbeat: live, or expired (rolled back by the next
        # writer); a pending compaction its runner's (expired: taken over by the next compact)
        beat = (
            None
            if instant.is_completed or clustering or instant.action not in WRITE_ACTIONS
            else compaction_status(storage, instant.timestamp, config)
            if instant.action == COMPACTION
            else heartbeat_status(storage, instant.timestamp, config)
        )
        if args.json:
            shown: dict[str, Any] = {
                "instant": instant.timestamp,
                "action": instant.action,
                "state": instant.state.name,
            }
            if clustering:
                shown["clustering"] = sorted(clusterings[instant.timestamp])
            if beat is not None:
                shown["heartbeat"] = {
                    "last_beat_ms": beat.last_beat_ms,
                    "age_ms": beat.age_ms,
                    "expired": beat.expired,
                }
                if beat.ahead_ms:  # dated ahead of this clock: live until it has passed
                    shown["heartbeat"]["ahead_ms"] = beat.ahead_ms
            print(json.dumps(shown), file=out)
        else:
            extra = f"  {_runner_text(beat, restore)}" if beat is not None else ""
            if clustering:
                groups = len(clusterings[instant.timestamp])
                extra = f"  clustering of {groups} file group(s), planned by Apache Hudi (never rolled back as failed)"
            print(f"{instant.timestamp}  {instant.action:<14} {instant.state.name}{extra}", file=out)
    return 0


def run_compact(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    from tidemark.announcements import announce_completed, announcement_security
    from tidemark.table.compaction import compact, earliest_write_inflight, run_compaction
    from tidemark.table.write_handles import ParquetConfig

    storage = open_storage(args.path, s3_options(args))
    read_properties(storage)
    settings = conf(args)
    parquet = ParquetConfig.from_conf(settings)  # a bad codec is refused before any change
    try:
        announcement_security(settings)
    except ValueError as e:
        raise TableError(f"the compaction's event settings: {e}") from None
    if args.engine != "local":
        try:
            from tidemark.spark.compaction_job import compact_on_spark
        except ModuleNotFoundError as e:
            raise MissingExtraError("tidemark compact --engine spark (the default)", e.name, "spark") from None
    prepare_table_change(storage, settings, "compact")
    concurrency = ConcurrencyConfig.from_conf(settings)
    if args.engine == "local":
        done = compact(storage, concurrency, functools.partial(run_compaction, parquet=parquet, config=concurrency))
    else:
        done = compact_on_spark(None, args.path, s3_options(args), concurrency, parquet=parquet, spark_conf=settings)
    # compact() leaves pending only the compactions another process runs (it warns of each)
    timeline = load_timeline(storage)
    left = [i.timestamp for i in timeline.pending().of_actions(COMPACTION)]
    for ts in left:
        print(f"compaction {ts} is being run by another process; left to it", file=out)
    # in single-writer mode compact() plans nothing while a write is pending (its warning says why)
    waiting = None if concurrency.optimistic else earliest_write_inflight(storage, timeline)
    if done is not None:
        print(f"compaction committed at {done.timestamp}", file=out)
    elif waiting is not None:
        print(
            f"nothing compacted yet: the {waiting.action} {waiting.timestamp} is pending; "
            "run tidemark compact again once it has ended",
            file=out,
        )
    elif not left:
        print("nothing to compact", file=out)
    if done is not None:
        announce_completed(settings, canonical_location(args.path), done.timestamp, done.action, "tidemark.compact")
    return 0


def run_rollback(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    from tidemark.table.write_client import preview_rollback, rollback

    storage = open_table(args, "roll back", args.dry_run, out)
    if args.dry_run:
        print_rollback_preview(out, preview_rollback(storage, args.instant, ConcurrencyConfig.from_conf(conf(args))))
        return 0
    # a write's heartbeat is judged by the interval its writer beats at (--conf, as the writer's)
    result = rollback(storage, args.instant, ConcurrencyConfig.from_conf(conf(args)))
    print(
        f"rolled back {result.rolled_back_name} at {result.rollback_instant.timestamp}: "
        f"{counted(len(result.deleted_files), 'file')} deleted, "
        f"{counted(len(result.rollback_log_files), 'rollback block')} written"
        + _found_by_listing(result.listed_partitions, result.markers_unreadable, "it had no markers"),
        file=out,
    )
    return 0


def print_rollback_preview(out: TextIO, preview: RollbackPreview, indent: str = "") -> None:
    """What a rollback would do, one line, then each file it would delete or mark."""
    target = preview.target
    what = f"finish the rollback {preview.resumes.timestamp} of" if preview.resumes else "roll back"
    print(
        f"{indent}would {what} {target.timestamp}.{target.action}: delete "
        f"{counted(len(preview.deleted_files), 'file')}, append "
        f"{counted(len(preview.rollback_log_files), 'rollback block')}"
        + _found_by_listing(preview.listed_partitions, preview.markers_unreadable, "it has no markers"),
        file=out,
    )
    for path in preview.deleted_files:
        print(f"{indent}  delete {path}", file=out)
    for path in preview.rollback_log_files:
        print(f"{indent}  rollback block in {path}", file=out)


def _found_by_listing(listed: tuple[str, ...] | None, markers_unreadable: bool, no_markers: str) -> str:
    """Why and how a rollback found its write's files by listing partitions ("" when its markers
    named them)."""
    if listed is None:
        return ""
    why = "its markers could not be read" if markers_unreadable else no_markers
    return f" ({why}: its files were found by listing {counted(len(listed), 'partition')})"
