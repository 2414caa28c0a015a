"""Hudi's metadata table (``.hoodie/metadata/``): tidemark never leaves one stale.

Apache Hudi 0.11+ writers keep a second, internal MOR table under ``.hoodie/metadata/`` with the
table's file listing (and optionally column stats, bloom filters, a record index). Its partitions
that are ready are listed in ``hoodie.table.metadata.partitions`` (those being built in
``...partitions.inflight``), and Apache's Spark reader takes its file listing from it whenever
``files`` is listed. tidemark does not maintain it, so:

* every command that changes a table calls :func:`check_changeable` first, before it
  writes anything at all (lock files and heartbeats included), and is refused while one is listed
  (or while the table has change data capture on, whose files tidemark does not write either,
  or while its ``hoodie.table.type`` is missing or COPY_ON_WRITE but its timeline holds
  deltacommits, which only merge-on-read tables have: each command would act on the wrong type;
  and, for a command that writes rows, while the table has Hudi's schema on read, whose renamed
  columns tidemark would write as null: see :mod:`tidemark.table.internal_schema`);
* ``hoodie.metadata.enable=false`` (Apache's own switch) makes :func:`prepare_table_change`
  disable it as Apache's writer does with its metadata off: first clear both properties, so every
  reader falls back to listing storage, and only then delete the folder. A crash between the two
  steps leaves an unlisted folder that no reader uses, and the next run with the switch deletes it.

There is no single chokepoint to hang the check on: writes start a heartbeat before their instant
exists, table services take the lock (or not, in single-writer mode) before they plan, and an
archive or a savepoint delete opens no instant. So each public entry point that changes a table
calls the check itself; the properties file is one small read.
"""

from __future__ import annotations

from collections.abc import Mapping

from tidemark.errors import InvalidTablePropertiesError, MetadataTableEnabledError, UnsupportedTableFeatureError
from tidemark.storage.base import Storage
from tidemark.table import properties as P
from tidemark.table.internal_schema import check_writable
from tidemark.timeline import DELTA_COMMIT, Timeline, load_timeline
from tidemark.timeline.archived import archive_files

#: defined beside the properties, which refuse an archive folder there
METADATA_FOLDER = P.METADATA_FOLDER
#: Hudi's switch of the metadata table (a writer setting; ``true`` by default in Hudi 0.11+)
METADATA_ENABLE = "hoodie.metadata.enable"


def listed_partitions(props: Mapping[str, str]) -> tuple[str, ...]:
    """The metadata table's partitions the properties list, ready ones then inflight ones, these
    marked ``(being built)`` (a message saying only "partitions x" reads as if they were ready)."""
    ready = [p.strip() for p in props.get(P.METADATA_PARTITIONS, "").split(",") if p.strip()]
    building = [p.strip() for p in props.get(P.METADATA_PARTITIONS_INFLIGHT, "").split(",") if p.strip()]
    return (
        *dict.fromkeys(ready),
        *(f"{p} (being built)" for p in dict.fromkeys(building) if p not in ready),
    )


def disable_requested(conf: Mapping[str, str]) -> bool:
    return conf.get(METADATA_ENABLE, "").strip().lower() == "false"


#: Hudi's change data capture: every write also writes ``-cdc`` log files, which Apache's CDC
#: queries require of every commit (``HoodieCDCExtractor``); tidemark does not write them
CDC_ENABLED = "hoodie.table.cdc.enabled"


def _check_no_cdc(storage: Storage, command: str, props: Mapping[str, str]) -> None:
    if props.get(CDC_ENABLED, "false").strip().lower() == "true":
        raise UnsupportedTableFeatureError(
            f"{storage.uri}: refusing to {command}: the table has change data capture on ({CDC_ENABLED}=true), "
            "whose -cdc log files Apache's CDC queries need for every commit; tidemark does not write them, so "
            "this change would break those queries. Nothing was changed; use Apache Hudi to change this table"
        )


def type_contradiction(storage: Storage, props: Mapping[str, str], timeline: Timeline | None = None) -> str | None:
    """What is wrong with the table type, or None: a missing ``hoodie.table.type`` (Hudi then
    takes COPY_ON_WRITE) or COPY_ON_WRITE on a table whose timeline holds deltacommits, which only
    merge-on-read tables have. ``timeline`` is loaded when not given, and only when the type is not
    MERGE_ON_READ."""
    stated = props.get(P.TABLE_TYPE)
    if stated == P.MERGE_ON_READ:
        return None
    deltas = (timeline if timeline is not None else load_timeline(storage)).of_actions(DELTA_COMMIT).instants
    if not deltas:
        return None
    said = f"{P.TABLE_TYPE}={stated}" if stated is not None else f"no {P.TABLE_TYPE} (Hudi takes {P.COPY_ON_WRITE})"
    return (
        f"{storage.full_uri(P.PROPERTIES_PATH)} says {said}, but its timeline holds deltacommits (e.g. "
        f"{deltas[-1].timestamp}), which only merge-on-read tables have"
    )


def _check_table_type(storage: Storage, command: str, props: Mapping[str, str], timeline: Timeline | None) -> None:
    wrong = type_contradiction(storage, props, timeline)
    if wrong:
        raise InvalidTablePropertiesError(
            f"{wrong}: refusing to {command}, which would treat a merge-on-read table as copy-on-write. Nothing was "
            f"changed; if the table is merge-on-read, set {P.TABLE_TYPE}={P.MERGE_ON_READ} in that file"
        )


def check_changeable(
    storage: Storage,
    command: str,
    props: Mapping[str, str] | None = None,
    timeline: Timeline | None = None,
    writes_rows: bool = True,
) -> None:
    """Refuse ``command`` when the table has what tidemark would leave stale: a metadata table
    (its partitions listed) or change data capture; or when its properties name the wrong type
    (see :func:`type_contradiction`; ``timeline``, when the caller has loaded it, saves a listing);
    or, where the command ``writes_rows`` (a write, a compaction; not a clean, an archive, a
    savepoint, a rollback or a restore, which delete or keep whole files and instants as Hudi's
    own do on such a table), when the table has schema on read.
    A location without a table passes (the command itself says so, or creates one)."""
    if props is None:
        props = P.find_properties(storage)
        if props is None:
            return
    _check_besides_metadata_table(storage, command, props, timeline)
    partitions = listed_partitions(props)
    if partitions:
        raise MetadataTableEnabledError(
            f"{storage.uri}: refusing to {command}: the table has a metadata table ({METADATA_FOLDER}/, partitions "
            f"{', '.join(partitions)} in hoodie.properties), the file listing Apache Hudi's readers use instead "
            f"of listing storage; tidemark does not maintain it, so this change would leave it stale (Apache's "
            f"readers would miss new files and fail on deleted ones). Nothing was changed. To go on, disable it "
            f"as Apache's writer does: run again with --conf {METADATA_ENABLE}=false (Apache's next writer "
            f"with the metadata table enabled rebuilds it)"
        )
    if writes_rows:  # last: a refusal worded for a clean and a compaction at once gives a reason both share
        check_writable(storage, command, timeline)


def _check_besides_metadata_table(
    storage: Storage, command: str, props: Mapping[str, str], timeline: Timeline | None
) -> None:
    """What refuses a change whether or not the metadata table is being disabled for it."""
    _check_no_cdc(storage, command, props)
    _check_table_type(storage, command, props, timeline)
    _check_archive_folder(storage, command, props)


def _check_archive_folder(storage: Storage, command: str, props: Mapping[str, str]) -> None:
    conflict = P.archive_folder_conflict(props)
    if conflict is not None:
        raise InvalidTablePropertiesError(f"{storage.uri}: refusing to {command}: {conflict}")


def disable_metadata_table(storage: Storage) -> bool:
    """Disable the metadata table as Apache's writer does with ``hoodie.metadata.enable=false``:
    clear ``hoodie.table.metadata.partitions`` and ``...inflight`` (kept, empty, as Hudi writes
    them), then delete ``.hoodie/metadata/``. Safe to run again after a crash at any point;
    True when it changed anything."""
    changed = False
    props = P.find_properties(storage)
    if props is None:
        return False
    if listed_partitions(props):
        # the properties first: from here on every reader lists storage, so whatever is left of
        # the folder is never read
        entries = dict(props.entries)
        entries[P.METADATA_PARTITIONS] = ""
        entries[P.METADATA_PARTITIONS_INFLIGHT] = ""
        P.write_properties(storage, P.TableProperties(entries))
        changed = True
    # never the archived timeline: the properties refuse an archive folder in here, but should one
    # get by, its files are the table's history, not the metadata table's
    archive = set(archive_files(storage, props.archive_folder))
    for info in list(storage.list(f"{METADATA_FOLDER}/")):
        if info.path in archive:
            continue
        storage.delete(info.path)
        changed = True
    storage.remove_empty_folders(METADATA_FOLDER)
    return changed


def prepare_table_change(storage: Storage, conf: Mapping[str, str], command: str, writes_rows: bool = True) -> None:
    """What every command that changes a table runs first: with ``hoodie.metadata.enable=false``
    the metadata table is disabled (or the deletion a crash interrupted is finished), otherwise
    the command is refused while one is listed (``writes_rows``: as for :func:`check_changeable`)."""
    check_change(storage, conf, command, writes_rows=writes_rows)
    if disable_requested(conf):
        disable_metadata_table(storage)


def check_change(
    storage: Storage,
    conf: Mapping[str, str],
    command: str,
    props: Mapping[str, str] | None = None,
    timeline: Timeline | None = None,
    writes_rows: bool = True,
) -> None:
    """Refuse ``command`` run with ``conf`` as :func:`prepare_table_change` would, changing
    nothing: with ``hoodie.metadata.enable=false`` a metadata table is no reason (it would be
    disabled first), the other reasons of :func:`check_changeable` stay."""
    if not disable_requested(conf):
        check_changeable(storage, command, props, timeline, writes_rows)
        return
    if props is None:
        props = P.find_properties(storage)
        if props is None:
            return
    _check_besides_metadata_table(storage, command, props, timeline)
    if writes_rows:
        check_writable(storage, command, timeline)


def describe(storage: Storage, props: Mapping[str, str]) -> str | None:
    """One line for ``table show`` about the metadata table, or None when there is none."""
    partitions = listed_partitions(props)
    if partitions:
        return (
            f"metadata table: present ({METADATA_FOLDER}/, partitions: {', '.join(partitions)}); tidemark reads "
            f"without it (storage listing) and refuses to change the table while it is listed; "
            f"--conf {METADATA_ENABLE}=false disables it first"
        )
    if any(True for _ in storage.list(f"{METADATA_FOLDER}/")):
        return (
            f"metadata table: {METADATA_FOLDER}/ is on storage but not listed in hoodie.properties, so no reader "
            f"uses it (a disable that was interrupted); the next change with --conf {METADATA_ENABLE}=false "
            "deletes it"
        )
    return None
