"""Table service commands: clean, archive, savepoint."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import TYPE_CHECKING, Any, TextIO

from tidemark.cli.options import add_table_path, conf, counted, open_table, storage_options

if TYPE_CHECKING:
    from tidemark.table_services.clean import CleanPlan, CleanResult
    from tidemark.table_services.restore import RestorePreview


def add_parsers(sub: Any) -> None:
    common = [storage_options()]
    c = sub.add_parser(
        "clean",
        parents=common,
        help="delete file versions no retained commit needs",
        description="Delete the old file slices (file versions) that the cleaner policy does not retain; "
        "savepointed files and the slices a pending compaction needs are kept. A clean left pending (a killed "
        "cleaner's) is finished first, and temporary files of killed writes untouched for an hour are removed. "
        "--dry-run prints what a clean would delete and deletes nothing.",
    )
    add_table_path(c)
    c.add_argument(
        "--policy",
        choices=["KEEP_LATEST_COMMITS", "KEEP_LATEST_FILE_VERSIONS", "KEEP_LATEST_BY_HOURS"],
        help="the cleaner policy (default: hoodie.cleaner.policy, else KEEP_LATEST_COMMITS); "
        "how much each keeps: --conf hoodie.cleaner.commits.retained, .fileversions.retained, .hours.retained",
    )
    c.add_argument("--dry-run", action="store_true", help="print exactly what a clean would delete, delete nothing")
    c.set_defaults(run=run_clean)

    a = sub.add_parser(
        "archive",
        parents=common,
        help="move old completed instants to the archived timeline",
        description="Move the oldest completed instants of the active timeline into Hudi's archive log "
        "(.hoodie/<hoodie.archivelog.folder>/, archived/ by default); their data files stay. Never without a "
        "completed clean, nor past the latest "
        "clean's earliest commit to not archive, the first savepoint, the earliest pending instant or the "
        "last hoodie.keep.min.commits writes. An archival that stopped half-way is finished first.",
    )
    add_table_path(a)
    a.add_argument("--dry-run", action="store_true", help="print exactly what would be archived, change nothing")
    a.set_defaults(run=run_archive)

    s = sub.add_parser(
        "savepoint",
        help="keep a commit's files from the cleaner",
        description="Savepoints: a completed write instant whose file slices the cleaner keeps, so that the "
        "table can be restored to it (tidemark restore).",
    )
    ssub = s.add_subparsers(dest="savepoint_command", required=True, metavar="COMMAND")
    p = ssub.add_parser(
        "create",
        parents=common,
        help="savepoint a completed commit",
        description="Savepoint a completed write instant: every file of the file slices visible as of it is "
        "kept by the cleaner until the savepoint is deleted. Refused for an instant whose files the last "
        "clean may already have deleted, and while a write instant (compaction and clustering included) "
        "earlier than it is pending: its files, read as of the instant once it completes, would not be kept.",
    )
    add_table_path(p)
    p.add_argument("instant", help="the completed write instant to savepoint (its time, as tidemark timeline lists it)")
    # as Hudi's CLI `savepoint create --user --comments`: recorded in the savepoint's metadata
    p.add_argument("--user", help="who savepoints it, recorded as savepointedBy (default: the user running this)")
    p.add_argument("--comment", default="", help="why, recorded as the savepoint's comments")
    p.set_defaults(run=run_savepoint)
    p = ssub.add_parser(
        "delete",
        parents=common,
        help="delete a savepoint",
        description="Delete a savepoint: its instant leaves the timeline, and the files only it kept are the "
        "cleaner's to delete again. The savepointed write itself stays. Refused while a restore to it is unfinished.",
    )
    add_table_path(p)
    p.add_argument("instant", help="the savepoint to delete (its time, as tidemark savepoint list prints it)")
    p.set_defaults(run=run_savepoint)
    lst = ssub.add_parser(
        "list",
        parents=common,
        help="list savepoints",
        description="Print the time of each completed savepoint of the table, oldest first, one per line.",
    )
    add_table_path(lst)
    lst.set_defaults(run=run_savepoint)

    r = sub.add_parser(
        "restore",
        parents=common,
        help="roll the table back to a savepoint",
        description="Roll the table back to a savepoint: every write instant after it (compactions included) "
        "is rolled back, newest first, under a restore instant: the base files and log files those writes "
        "wrote are deleted (log files shared with older writes get rollback blocks). Refused while a write "
        "after the savepoint is still running. A restore that stopped half-way is finished by running the "
        "same command again, from its plan; until then writes, compactions, rollbacks, new savepoints and deleting "
        "its savepoint are refused. --dry-run prints what it would roll back and delete, and changes nothing.",
    )
    add_table_path(r)
    r.add_argument("instant", help="the savepoint to restore to (its time, as tidemark savepoint list prints it)")
    r.add_argument(
        "--dry-run", action="store_true", help="print the writes it would roll back and their files, change nothing"
    )
    r.set_defaults(run=run_restore)


def run_clean(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    from tidemark.table.concurrency import ConcurrencyConfig
    from tidemark.table_services.clean import (
        ENABLED_KEY,
        CleanConfig,
        clean,
        pending_clean_plans,
        plan_clean,
        remove_abandoned_temporaries,
    )
    from tidemark.timeline import load_timeline

    settings = conf(args)
    if args.policy:
        settings["hoodie.cleaner.policy"] = args.policy
    config = CleanConfig.from_conf(settings)
    if not config.enabled:
        # switched off, the command changes nothing: not the temporaries and claims either, nor
        # the metadata table a real run would first disable
        open_table(args)
        print(f"nothing to clean: cleaning is off ({ENABLED_KEY}=false)", file=out)
        return 0
    storage = open_table(args, "clean", args.dry_run, out)
    temporaries = remove_abandoned_temporaries(storage, dry_run=args.dry_run)
    if temporaries:
        verb = "would remove" if args.dry_run else "removed"
        print(f"{verb} {len(temporaries)} temporary files left by interrupted writes:", file=out)
        for path in temporaries:
            print(f"  {path}", file=out)
    if args.dry_run:
        timeline = load_timeline(storage)
        pending = pending_clean_plans(storage, timeline)
        for instant, pending_plan in pending:
            _print_files(out, f"would first finish the pending clean {instant.timestamp}: would delete", pending_plan)
        plan = plan_clean(storage, config, timeline=timeline)
        if pending:  # the real run plans again once they are done: what they delete is not planned twice
            taken = {f for _, p in pending for files in p.files_to_delete.values() for f in files}
            left = {part: tuple(f for f in files if f not in taken) for part, files in plan.files_to_delete.items()}
            note = "planned before the pending cleans finish: the real run plans again once they have"
            plan = dataclasses.replace(
                plan, files_to_delete={k: v for k, v in left.items() if v}, reasons=(*plan.reasons, note)
            )
        _print_plan(out, "would delete", plan)
        return 0
    result = clean(storage, config, concurrency=ConcurrencyConfig.from_conf(settings))
    if result is None:
        print("nothing to clean: no file is due for deletion", file=out)
        return 0
    for first in result.finished_first:
        _print_files(
            out, f"finished the pending clean {first.instant.timestamp}{_by_another(first)}: deleted", first.plan
        )
    _print_plan(out, f"clean {result.instant.timestamp}{_by_another(result)} deleted", result.plan)
    return 0


def _by_another(run: CleanResult) -> str:
    # two cleaners at once both run a pending clean: the one completing it second did no harm
    return " (another cleaner running it at the same time completed it first)" if run.completed_by_another else ""


def _print_plan(out: TextIO, verb: str, plan: CleanPlan) -> None:
    ectr = plan.earliest_commit_to_retain
    print(
        f"{verb} {counted(plan.file_count, 'file')}; earliest commit to retain: {ectr.timestamp if ectr else '-'}; "
        f"earliest commit to not archive: {plan.earliest_commit_to_not_archive or '-'}; "
        f"savepoints: {', '.join(plan.savepointed) or '-'}",
        file=out,
    )
    for reason in plan.reasons:
        print(f"  note: {reason}", file=out)
    _print_paths(out, plan)


def _print_files(out: TextIO, verb: str, plan: CleanPlan) -> None:
    print(f"{verb} {counted(plan.file_count, 'file')}", file=out)
    _print_paths(out, plan)


def _print_paths(out: TextIO, plan: CleanPlan) -> None:
    for files in plan.files_to_delete.values():
        for f in files:
            print(f"  {f}", file=out)


def run_archive(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    from tidemark.table.concurrency import ConcurrencyConfig
    from tidemark.table_services.archive import ArchiveConfig, archive

    settings = conf(args)
    result = archive(
        open_table(args, "archive", args.dry_run, out),
        ArchiveConfig.from_conf(settings),
        dry_run=args.dry_run,
        concurrency=ConcurrencyConfig.from_conf(settings),
    )
    if result.finished_from_before:
        # a dry run's plan is the one made after that, as the real run makes it
        done = (
            "would finish the archival a stopped run left: remove"
            if args.dry_run
            else "finished the archival a stopped run left: removed"
        )
        print(f"{done} {len(result.finished_from_before)} archived instants from the active timeline", file=out)
        for name in result.finished_from_before:
            print(f"  {name}", file=out)
    verb = "would archive" if args.dry_run else "archived"
    plan = result.plan
    print(
        f"{verb} {counted(len(plan.instants), 'instant')}"
        + (f" into {result.archive_file}" if result.archive_file else "")
        + (f"; stopped by: {plan.blocked_by}" if plan.blocked_by else ""),
        file=out,
    )
    for instant in plan.instants:
        print(f"  {instant.timestamp}  {instant.action}", file=out)
    return 0


def run_savepoint(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    from tidemark.table.concurrency import ConcurrencyConfig
    from tidemark.table_services.savepoint import create_savepoint, delete_savepoint, list_savepoints

    command = {"create": "create a savepoint", "delete": "delete a savepoint"}.get(args.savepoint_command)
    storage = open_table(args, command)
    if args.savepoint_command == "create":
        create_savepoint(storage, args.instant, args.comment, ConcurrencyConfig.from_conf(conf(args)), user=args.user)
        print(f"savepoint created at {args.instant}", file=out)
    elif args.savepoint_command == "delete":
        archived = delete_savepoint(storage, args.instant, ConcurrencyConfig.from_conf(conf(args)))
        # said: the commit left the active timeline (`tidemark timeline` no longer lists it)
        first = "; its commit was archived first, as archival had gone beyond it" if archived else ""
        print(f"savepoint {args.instant} deleted{first}", file=out)
    else:
        savepoints = list_savepoints(storage)
        for ts in savepoints:
            print(ts, file=out)
        if not savepoints:  # said aside, so that scripts reading the list read an empty one
            print(f"no savepoints on {storage.uri}", file=sys.stderr)
    return 0


def run_restore(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    from tidemark.table.concurrency import ConcurrencyConfig
    from tidemark.table.file_system_view import plan_file_path
    from tidemark.table_services.restore import preview_restore, restore
    from tidemark.timeline import avro_metadata as avro
    from tidemark.timeline import instant_path, read_instant

    storage = open_table(args, "restore", args.dry_run, out)
    if args.dry_run:
        _print_restore_preview(out, preview_restore(storage, args.instant, ConcurrencyConfig.from_conf(conf(args))))
        return 0
    result = restore(storage, args.instant, ConcurrencyConfig.from_conf(conf(args)))
    done = result.instant
    where = storage.full_uri(instant_path(done))
    metadata = avro.deserialize(read_instant(storage, done), "HoodieRestoreMetadata", where)
    rolled_back = metadata.get("instantsToRollback") or []
    deleted = sorted(  # paths in the table, whether a rollback recorded full locations (as Hudi does) or not
        plan_file_path(partition, path)
        for rollbacks in (metadata.get("hoodieRestoreMetadata") or {}).values()
        for rb in rollbacks
        for partition, files in (rb.get("partitionMetadata") or {}).items()
        for path in (files.get("successDeleteFiles") or [])
    )
    # two restores to one savepoint at once both carry out its plan: the one completing it second
    # did no harm, and reports what the restore did
    by_another = (
        "; another restore running it at the same time completed it first" if result.completed_by_another else ""
    )
    print(
        f"restored to savepoint {args.instant} (restore instant {done.timestamp}{by_another}): rolled back "
        f"{counted(len(rolled_back), 'write')} ({', '.join(rolled_back) or '-'}), "
        f"deleted {counted(len(deleted), 'file')}",
        file=out,
    )
    for path in deleted:
        print(f"  {path}", file=out)
    return 0


def _print_restore_preview(out: TextIO, preview: RestorePreview) -> None:
    from tidemark.cli.table import print_rollback_preview

    rollbacks = preview.rollbacks
    deleted = sum(len(r.deleted_files) for r in rollbacks)
    marked = sum(len(r.rollback_log_files) for r in rollbacks)
    first = f"would finish the restore {preview.resumes.timestamp} from its plan: " if preview.resumes else "would "
    print(
        f"{first}restore to savepoint {preview.savepoint}: roll back {counted(len(rollbacks), 'write')} "
        f"({', '.join(r.target.timestamp for r in rollbacks) or '-'}), newest first; delete "
        f"{counted(deleted, 'file')}, append {counted(marked, 'rollback block')}",
        file=out,
    )
    for rollback in rollbacks:
        print_rollback_preview(out, rollback, indent="  ")
