"""A table Apache Hudi wrote with its metadata table (``hoodie.table.metadata.partitions`` lists
``files``) is never changed by tidemark, which does not maintain it: every command that changes a
table is refused, nothing on storage changes, and the error says what to do. With
``hoodie.metadata.enable=false`` tidemark disables the metadata table as Apache's writer does,
and a crash half-way leaves a table both readers read correctly."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli import listing, tidemark
from tests.support.faults import FaultyStorage, InjectedFaultError
from tests.support.fixtures import extract_table, fixtures_root
from tests.support.model import apache_snapshot, data_rows
from tidemark.storage import LocalStorage
from tidemark.table import properties as P
from tidemark.table.metadata_table import METADATA_FOLDER, disable_metadata_table
from tidemark.table.snapshot import read_snapshot
from tidemark.timeline import load_timeline
from tidemark.timeline.archived import read_archived

DISABLE = ["--conf", "hoodie.metadata.enable=false"]


def _with_metadata_table(tmp_path: Path) -> Path:
    """The Apache-written MOR trips table, as a Hudi 0.11+ writer with the metadata table on
    leaves it: ``files`` listed in hoodie.properties (ready) and ``column_stats`` being built, and
    a metadata table under ``.hoodie/metadata/``."""
    table = extract_table(fixtures_root() / "tables" / "mor" / "v6_trips_8i1u.zip", tmp_path)
    storage = LocalStorage(table)
    props = P.read_properties(storage)
    entries = {**props.entries, P.METADATA_PARTITIONS: "files", P.METADATA_PARTITIONS_INFLIGHT: "column_stats"}
    P.write_properties(storage, P.TableProperties(entries))
    meta = table / METADATA_FOLDER
    for name in (
        ".hoodie/hoodie.properties",
        ".hoodie/20250331030645735.deltacommit",
        "files/.files-0000-0_00000000000000010.log.1_0-0-0",
        "files/.hoodie_partition_metadata",
    ):
        (meta / name).parent.mkdir(parents=True, exist_ok=True)
        (meta / name).write_bytes(b"metadata table file " + name.encode())
    return table


def _run(*argv: str) -> tuple[int, str, str]:
    """``tidemark ARGV`` as a user runs it (the refusals come before Spark would start)."""
    proc = tidemark(*argv)
    return proc.returncode, proc.stdout, proc.stderr


def _expected_rows(table: Path) -> list[dict[str, object]]:
    return data_rows(read_snapshot(LocalStorage(table)), "uuid", "city")


def test_every_mutating_command_is_refused_and_nothing_changes(
    tmp_path: Path,
) -> None:
    table = _with_metadata_table(tmp_path)
    path = str(table)
    latest = load_timeline(LocalStorage(table)).completed().write_instants().instants[-1].timestamp
    rows = tmp_path / "input.jsonl"
    code, out, _ = _run("table", "read", path, "--format", "jsonl")
    assert code == 0
    assert out.count("\n") == 8
    rows.write_text(out.replace('"rider-A"', '"rider-A2"'))
    before = listing(table)
    commands = {
        "write": ["write", path, "--input", str(rows), "--operation", "upsert"],
        "compact": ["compact", path],
        "clean": ["clean", path, "--conf", "hoodie.cleaner.commits.retained=1"],
        "archive": ["archive", path, "--conf", "hoodie.keep.min.commits=1", "--conf", "hoodie.keep.max.commits=2"],
        "roll back": ["rollback", path, latest],
        "restore": ["restore", path, latest],
        "create a savepoint": ["savepoint", "create", path, latest],
        "delete a savepoint": ["savepoint", "delete", path, latest],
    }
    for verb, argv in commands.items():
        code, _, err = _run(*argv)
        assert code == 1, (verb, err)
        line = err.strip()
        assert "\n" not in line, line  # one line
        assert f"refusing to {verb}" in line
        assert ".hoodie/metadata/" in line
        assert "files, column_stats (being built)" in line
        assert "Apache Hudi's readers" in line
        assert "stale" in line
        assert "--conf hoodie.metadata.enable=false" in line
        assert listing(table) == before, f"{verb} changed storage"
    # read-only commands still work, and `table show` says what tidemark does with it
    code, out, _ = _run("table", "show", path)
    assert code == 0
    assert "metadata table: present (.hoodie/metadata/, partitions: files, column_stats (being built))" in out
    assert "refuses to change the table" in out
    # a dry run still plans, and says what the real run does with the metadata table: it printed a
    # plan the real run refused, or that began by deleting .hoodie/metadata/, without a word
    dry_runs = {"clean": ["clean", path], "archive": ["archive", path], "roll back": commands["roll back"]}
    for verb, argv in dry_runs.items():
        code, out, err = _run(*argv, "--dry-run")
        assert code == 0, err
        assert f"the real run would be refused: {table}: refusing to {verb}: the table has a metadata" in out
        assert out.splitlines()[1].startswith("would "), out  # then the plan
        code, out, err = _run(*argv, "--dry-run", *DISABLE)
        assert code == 0, err
        assert "would first disable the metadata table (.hoodie/metadata/)" in out
        assert "refused" not in out
    assert listing(table) == before


def test_disabling_the_metadata_table_then_changing_the_table(
    tmp_path: Path,
) -> None:
    table = _with_metadata_table(tmp_path)
    expected = _expected_rows(table)
    code, out, err = _run("compact", str(table), *DISABLE)
    assert code == 0, err
    assert "compaction committed" in out
    props = P.read_properties(LocalStorage(table))
    # cleared, as Hudi's clearMetadataPartitions leaves them: present and empty; checksum intact
    assert props[P.METADATA_PARTITIONS] == ""
    assert props[P.METADATA_PARTITIONS_INFLIGHT] == ""
    assert props[P.CHECKSUM] == str(P.table_checksum(props[P.DATABASE], props.name))
    assert not (table / METADATA_FOLDER).exists()
    assert _expected_rows(table) == expected
    assert data_rows(apache_snapshot(str(table)), "uuid", "city") == expected
    # from now on the table is an ordinary one: no switch needed
    assert _run("savepoint", "create", str(table), load_timeline(LocalStorage(table)).instants[-1].timestamp)[0] == 0
    code, out, _ = _run("table", "show", str(table))
    assert "metadata table" not in out


@pytest.mark.parametrize("crash_at", [1, 2, 3, 4, 6])
def test_a_crash_while_disabling_leaves_a_table_both_readers_read(tmp_path: Path, crash_at: int) -> None:
    """The crash seam: the process dies at its ``crash_at``-th storage change (1 to 3: the
    rewrite of hoodie.properties, as Hudi's: the backup, the file, the backup deleted; 4 and
    later: deleting the metadata table's files)."""
    table = _with_metadata_table(tmp_path)
    expected = _expected_rows(table)
    faulty = FaultyStorage(LocalStorage(table))
    faulty.arm(crash_at)
    with pytest.raises(InjectedFaultError):
        disable_metadata_table(faulty)
    storage = LocalStorage(table)
    listed = P.read_properties(storage).get(P.METADATA_PARTITIONS)
    left = list(storage.list(f"{METADATA_FOLDER}/"))
    assert left, "the crash came before the folder was gone"
    # both readers read the table as before, whichever step the crash interrupted
    assert _expected_rows(table) == expected
    assert data_rows(apache_snapshot(str(table)), "uuid", "city") == expected
    if crash_at <= 2:  # before the new file: still listed, still refused
        assert listed == "files"
        assert "refusing to compact" in _run("compact", str(table))[2]
    else:  # cleared first: no reader uses what is left, and `table show` says so
        assert listed == ""
        out = _run("table", "show", str(table))[1]
        assert "not listed in hoodie.properties, so no reader uses it" in out
    # the next run with the switch finishes the job
    code, _, err = _run("compact", str(table), *DISABLE)
    assert code == 0, err
    assert not (table / METADATA_FOLDER).exists()
    assert P.read_properties(storage)[P.METADATA_PARTITIONS] == ""
    assert _expected_rows(table) == expected
    assert data_rows(apache_snapshot(str(table)), "uuid", "city") == expected


def test_library_entry_points_refuse_too(tmp_path: Path) -> None:
    """The table services' processes call the library, not the CLI: it refuses on its own."""
    from tidemark.errors import MetadataTableEnabledError
    from tidemark.table.compaction import compact
    from tidemark.table.write_client import begin_write, rollback_pending_writes
    from tidemark.table_services.archive import ArchiveConfig, archive
    from tidemark.table_services.clean import CleanConfig, clean
    from tidemark.table_services.savepoint import create_savepoint

    table = _with_metadata_table(tmp_path)
    storage = LocalStorage(table)
    before = listing(table)
    latest = load_timeline(storage).instants[-1].timestamp
    calls = [
        lambda: begin_write(storage, "deltacommit", "upsert"),
        lambda: rollback_pending_writes(storage),
        lambda: compact(storage),
        lambda: clean(storage, CleanConfig.from_conf({"hoodie.cleaner.commits.retained": "1"})),
        lambda: archive(storage, ArchiveConfig.from_conf({})),
        lambda: create_savepoint(storage, latest),
    ]
    for call in calls:
        with pytest.raises(MetadataTableEnabledError):
            call()
        assert listing(table) == before


def test_a_write_that_finds_a_metadata_table_at_commit_is_rolled_back(tmp_path: Path) -> None:
    """An Apache writer that built the metadata table while a tidemark write ran: the commit would
    leave it stale, so the write is rolled back instead."""
    from tidemark.errors import MetadataTableEnabledError
    from tidemark.table.write_client import begin_write

    table = extract_table(fixtures_root() / "tables" / "mor" / "v6_trips_8i1u.zip", tmp_path)
    storage = LocalStorage(table)
    expected = _expected_rows(table)
    pending = begin_write(storage, "deltacommit", "upsert")
    props = P.read_properties(storage)
    P.write_properties(storage, P.TableProperties({**props.entries, P.METADATA_PARTITIONS: "files"}))
    with pytest.raises(MetadataTableEnabledError, match="refusing to commit this write"):
        pending.commit([], "upsert", "{}")
    timeline = load_timeline(storage)
    assert timeline.find(pending.instant) is None
    assert [i.action for i in timeline.completed().instants][-1] == "rollback"
    assert _expected_rows(table) == expected


def _archive_in_the_metadata_folder(tmp_path: Path, value: str = "metadata") -> tuple[Path, list[Path]]:
    """A table with its archived timeline in ``.hoodie/metadata/`` (``hoodie.archivelog.folder=metadata``,
    as the tidemark before the check wrote it), and a metadata table file left beside it."""
    from tests.support.table_builder import TableBuilder
    from tidemark.table_services.archive import ArchiveConfig, archive
    from tidemark.table_services.clean import CleanConfig, clean

    t = TableBuilder(LocalStorage(tmp_path))
    t.insert(["a"], 1)
    for n in range(2, 9):
        t.update(["a"], n)
    clean(t.storage, CleanConfig(commits_retained=2))
    assert archive(t.storage, ArchiveConfig(min_commits=2, max_commits=3)).plan.instants
    (tmp_path / METADATA_FOLDER).mkdir(parents=True)
    archived = []
    for old in sorted((tmp_path / ".hoodie" / "archived").iterdir()):
        archived.append(old.rename(tmp_path / METADATA_FOLDER / old.name))
    (tmp_path / ".hoodie" / "archived").rmdir()
    (tmp_path / METADATA_FOLDER / "files").mkdir()
    (tmp_path / METADATA_FOLDER / "files" / ".files-0000-0_00000000000000010.log.1_0-0-0").write_bytes(b"x")
    path = tmp_path / P.PROPERTIES_PATH
    path.write_text(path.read_text().replace("hoodie.archivelog.folder=archived", f"hoodie.archivelog.folder={value}"))
    return tmp_path, archived


@pytest.mark.parametrize(
    ("value", "named"),
    [("metadata", "'metadata'"), ("x/../metadata", "'x/../metadata' (resolved: .hoodie/metadata)")],
)
def test_an_archive_in_the_metadata_folder_is_refused_not_deleted(tmp_path: Path, value: str, named: str) -> None:
    """``hoodie.archivelog.folder=metadata`` was taken for an interrupted metadata-table disable:
    ``--conf hoodie.metadata.enable=false`` deleted the archived timeline, and incremental reads
    then returned too few rows. Changes are refused, and nothing is deleted; reads go on. A ``..``
    that stays in ``.hoodie`` failed every read ("leads out of .hoodie"): it is resolved."""
    table, archived = _archive_in_the_metadata_folder(tmp_path, value)
    before = listing(table)
    for argv in (["clean", str(table), *DISABLE], ["clean", str(table)], ["archive", str(table)]):
        code, _, err = _run(*argv)
        assert code != 0
        assert (
            f"{table}: refusing to {argv[0]}: hoodie.archivelog.folder={named} puts the archived timeline in "
            ".hoodie/metadata/, the metadata table's folder" in err
        ), err
        assert listing(table) == before
    assert all(path.exists() for path in archived)
    code, out, err = _run("timeline", str(table), "--archived")
    assert code == 0, err
    assert out.count("deltacommit    COMPLETED") >= 5, out  # the archived timeline, read
    assert _run("table", "show", str(table))[0] == 0


def test_disabling_the_metadata_table_never_deletes_an_archive_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defence in depth, should the properties' check be passed by: the disable deletes the
    metadata table's files and leaves the archive log files."""
    table, archived = _archive_in_the_metadata_folder(tmp_path)
    monkeypatch.setattr(P, "RESERVED_FOLDERS", {})
    storage = LocalStorage(table)
    assert disable_metadata_table(storage)
    assert sorted(info.path for info in storage.list(f"{METADATA_FOLDER}/")) == [
        f"{METADATA_FOLDER}/{path.name}" for path in archived
    ]
    assert read_archived(storage, P.read_properties(storage).archive_folder), "the archived timeline reads as before"
