"""``hoodie.properties`` read and written by Java's ``Properties`` rules, as Hudi loads it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tidemark.errors import InvalidTablePropertiesError, TableNotFoundError, UnsupportedTableFeatureError
from tidemark.storage import LocalStorage
from tidemark.table import properties as P
from tidemark.table.metadata_table import check_changeable


def _props(**extra: str) -> P.TableProperties:
    return P.TableProperties.create({P.NAME: "trips", P.DATABASE: "default", **extra})


def test_non_ascii_is_written_as_java_escapes_and_read_back(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path)
    schema = '{"type":"record","name":"r","fields":[{"name":"v","doc":"élève 😀","type":"long"}]}'
    props = P.TableProperties.create({P.NAME: "trips_café", P.DATABASE: "default", P.CREATE_SCHEMA: schema})
    P.write_properties(storage, props, create=True)
    text = (tmp_path / ".hoodie" / "hoodie.properties").read_bytes()
    assert text.isascii()  # Hudi loads the file as ISO-8859-1
    assert b"hoodie.table.name=trips_caf\\u00E9" in text
    assert b"\\u00E9l\\u00E8ve \\uD83D\\uDE00" in text  # UTF-16 units, as Java writes them
    read = P.read_properties(storage)  # the checksum is over the decoded name
    assert read.name == "trips_café"
    assert read[P.CREATE_SCHEMA] == schema


def test_java_separators_continuations_and_comments() -> None:
    text = (
        "#Properties saved on ...\n"
        "  ! another comment\n"
        "hoodie.table.metadata.partitions files\n"
        "a\\ key\\=x = v : w\n"
        "hoodie.table.name:trips\n"
        "long=one,\\\n"
        "     two\n"
        "empty\n"
    )
    assert P.parse_properties(text) == {
        "hoodie.table.metadata.partitions": "files",
        "a key=x": "v : w",
        "hoodie.table.name": "trips",
        "long": "one,two",
        "empty": "",
    }
    with pytest.raises(InvalidTablePropertiesError, match="malformed"):
        P.parse_properties("k=\\u12G4\n")
    with pytest.raises(InvalidTablePropertiesError, match=re.escape("malformed \\uXXXX escape '\\\\u12'")):
        P.parse_properties("k=\\u12\n")
    with pytest.raises(InvalidTablePropertiesError, match="half a surrogate pair"):
        P.parse_properties("k=\\uD83D\n")
    # lines end at \n, \r and \r\n only, as in Java: a form feed is a blank, U+2028 a character
    assert P.parse_properties("k\f=v\fw\r\nname=a\u2028b\rlast=1") == {"k": "v\fw", "name": "a\u2028b", "last": "1"}
    # escaped separators, blanks, tabs and backslashes in keys and values; a surrogate pair is one character
    assert P.parse_properties("t\\:k\\ \\t = \\\\x\\ty\\uD83D\\uDE00\\q\n") == {"t:k \t": "\\x\ty\U0001f600q"}


def test_a_key_separated_by_a_blank_is_seen_by_the_metadata_table_guard(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path)
    P.write_properties(storage, _props(), create=True)
    path = tmp_path / ".hoodie" / "hoodie.properties"
    path.write_text(path.read_text() + "hoodie.table.metadata.partitions files\n")
    with pytest.raises(Exception, match="the table has a metadata table"):
        check_changeable(storage, "write")


def test_the_backup_stands_in_for_a_missing_or_damaged_file(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path)
    with pytest.raises(TableNotFoundError):
        P.read_properties(storage)
    storage.write(P.BACKUP_PATH, _props().to_text().encode())
    assert P.read_properties(storage).name == "trips"  # an update cut short after the backup
    damaged = _props().to_text().replace("hoodie.table.name=trips", "hoodie.table.name=trops")
    storage.write(P.PROPERTIES_PATH, damaged.encode())
    assert P.read_properties(storage).name == "trips"  # checksum fails: the backup, as Hudi
    storage.delete(P.BACKUP_PATH)
    with pytest.raises(InvalidTablePropertiesError, match="checksum"):
        P.read_properties(storage)


def test_an_unsupported_feature_is_not_hidden_by_the_backup(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path)
    P.write_properties(storage, _props(**{P.BASE_FILE_FORMAT: "HFILE"}), create=True)
    storage.write(P.BACKUP_PATH, _props().to_text().encode())
    with pytest.raises(UnsupportedTableFeatureError, match="HFILE"):
        P.read_properties(storage)


def test_a_new_table_says_its_instant_times_are_utc_and_apaches_reader_reads_it(tmp_path: Path) -> None:
    from tests.support.model import apache_snapshot
    from tests.support.table_builder import TableBuilder

    table = TableBuilder(LocalStorage(tmp_path))
    table.insert(["a", "b"], 1)
    text = (tmp_path / ".hoodie" / "hoodie.properties").read_text()
    assert "hoodie.table.timeline.timezone=UTC\n" in text  # Hudi's default, LOCAL, is each writer's own zone
    assert sorted(apache_snapshot(str(tmp_path)).column("id").to_pylist()) == ["a", "b"]
    # a table that says otherwise keeps what it says
    assert _props(**{P.TIMELINE_TIMEZONE: "LOCAL"})[P.TIMELINE_TIMEZONE] == "LOCAL"


def test_the_properties_are_read_only_and_not_the_callers_dict() -> None:
    """TableProperties said "a read-only mapping" and its entries were a plain dict: an edit changed
    the record key every later read of the object took."""
    given = {P.NAME: "t", P.RECORD_KEY_FIELDS: "id"}
    props = P.TableProperties(given)
    with pytest.raises(TypeError):
        props.entries[P.RECORD_KEY_FIELDS] = "name"  # type: ignore[index]
    given[P.RECORD_KEY_FIELDS] = "name"
    assert props.record_key_fields == ("id",)


@pytest.mark.parametrize(
    "folder", ["../outside", "history/../../x", "x/../..", "..", "/tmp/archive", "s3://bucket/archive"]
)
def test_an_archivelog_folder_outside_the_metafolder_is_refused(tmp_path: Path, folder: str) -> None:
    storage = LocalStorage(tmp_path)
    P.write_properties(storage, _props(**{P.ARCHIVELOG_FOLDER: folder}), create=True)
    with pytest.raises(InvalidTablePropertiesError, match=re.escape(f"hoodie.archivelog.folder={folder!r} leads out")):
        P.read_properties(storage)


def test_the_archive_folder_is_in_the_metafolder_as_hudi_joins_it() -> None:
    assert _props().archive_folder == ".hoodie/archived"
    assert _props(**{P.ARCHIVELOG_FOLDER: "history/"}).archive_folder == ".hoodie/history"
    assert _props(**{P.ARCHIVELOG_FOLDER: ""}).archive_folder == ".hoodie"  # the archive files beside the timeline
    without = P.TableProperties({k: v for k, v in _props().items() if k != P.ARCHIVELOG_FOLDER})
    assert without.archive_folder == ".hoodie/archived"  # Hudi's default


@pytest.mark.parametrize(
    ("folder", "where"),
    [
        ("x/../archived", ".hoodie/archived"),
        ("a/./b/../c/", ".hoodie/a/c"),
        ("x/..", ".hoodie"),
        ("../.hoodie/history", ".hoodie/history"),
    ],
)
def test_dot_dot_parts_that_stay_in_the_metafolder_resolve_as_hadoops_path(
    tmp_path: Path, folder: str, where: str
) -> None:
    """Any ``..`` part was taken as leading out of ``.hoodie``, and every read of the table failed
    although Hudi (Hadoop's Path normalises ``.hoodie/x/../archived`` to ``.hoodie/archived``) and
    hudi-rs read it."""
    storage = LocalStorage(tmp_path)
    P.write_properties(storage, _props(**{P.ARCHIVELOG_FOLDER: folder}), create=True)
    assert P.read_properties(storage).archive_folder == where


@pytest.mark.parametrize("layout", ["2", "-1", "one", "1 "])
def test_a_timeline_layout_hudi_0_14_refuses_is_refused(tmp_path: Path, layout: str) -> None:
    """Layout 2 (Hudi 1.x) on a version-6 table was read as layout 1 without a word."""
    storage = LocalStorage(tmp_path)
    P.write_properties(storage, _props(**{P.TIMELINE_LAYOUT: layout}), create=True)
    with pytest.raises(
        InvalidTablePropertiesError,
        match=re.escape(f"hoodie.properties: {P.TIMELINE_LAYOUT}={layout!r} is not supported"),
    ):
        P.read_properties(storage)


@pytest.mark.parametrize("layout", [None, "0", "01"])
def test_a_missing_or_zero_timeline_layout_reads_as_hudi_0_14_reads_it(tmp_path: Path, layout: str | None) -> None:
    # Hudi 0.14's reader and writer are built with layout 1 and read such a table as layout 1
    props = {k: v for k, v in _props().items() if k != P.TIMELINE_LAYOUT}
    storage = LocalStorage(tmp_path)
    P.write_properties(
        storage, P.TableProperties(props if layout is None else {**props, P.TIMELINE_LAYOUT: layout}), create=True
    )
    assert P.read_properties(storage).name == "trips"


def test_a_trailing_blank_is_shown_and_a_leading_zero_read_as_java_reads_it(tmp_path: Path) -> None:
    """`table version 6  is not supported (tidemark reads version 6)`: the blank was invisible, and
    06 (which Java's parseInt reads as 6) was refused."""
    storage = LocalStorage(tmp_path)
    good = _props()
    for key, value, error in [
        (P.TABLE_VERSION, "6 ", "table version '6 ' is not supported"),
        (P.TABLE_TYPE, "MERGE_ON_READ ", "hoodie.table.type='MERGE_ON_READ ' is not a Hudi table type"),
        (P.CHECKSUM, good[P.CHECKSUM] + " ", f"checksum '{good[P.CHECKSUM]} ' does not match {good[P.CHECKSUM]}"),
    ]:
        storage.write(P.PROPERTIES_PATH, P.TableProperties({**good, key: value}).to_text().encode())
        with pytest.raises(InvalidTablePropertiesError, match=re.escape(error)):
            P.read_properties(storage)
    leading_zeros = {**good, P.TABLE_VERSION: "06", P.CHECKSUM: "0" + good[P.CHECKSUM]}
    storage.write(P.PROPERTIES_PATH, P.TableProperties(leading_zeros).to_text().encode())
    assert P.read_properties(storage).name == "trips"


def test_a_stale_backup_beside_a_sound_file_is_not_read_and_not_written_back(tmp_path: Path) -> None:
    """A backup left beside a sound file (a Hudi update cut short after writing the new file) was
    read whenever tidemark refused the file, and merge_update wrote it back: a version 8 table's
    properties were turned into its old version 6 ones."""
    from tests.support.cli import listing, tidemark
    from tests.support.table_builder import TableBuilder
    from tidemark.table.write_client import mark_expression_blocks

    table = TableBuilder(LocalStorage(tmp_path))
    first = table.insert(["a", "b"], 1)
    table.update(["a"], 2)
    main = tmp_path / ".hoodie" / "hoodie.properties"
    (tmp_path / ".hoodie" / "hoodie.properties.backup").write_bytes(main.read_bytes())
    text = main.read_text().replace("hoodie.table.version=6", "hoodie.table.version=8")
    main.write_text(text.replace("hoodie.timeline.layout.version=1", "hoodie.timeline.layout.version=2"))
    before = listing(tmp_path)

    commands = [
        ["compact", str(tmp_path), "--engine", "local"],
        ["savepoint", "create", str(tmp_path), first],
        ["clean", str(tmp_path)],
        ["rollback", str(tmp_path), first],
        ["table", "read", str(tmp_path)],
        ["table", "show", str(tmp_path)],
        ["timeline", str(tmp_path)],
    ]
    for args in commands:
        run = tidemark(*args)
        assert run.returncode != 0, (args, run.stdout)
        assert f"{main}: table version '8' is not supported" in run.stderr, (args, run.stderr)
        assert "hoodie.properties.backup" not in run.stderr, (args, run.stderr)
    with pytest.raises(InvalidTablePropertiesError, match="table version '8' is not supported"):
        mark_expression_blocks(LocalStorage(tmp_path))  # what merge_update runs after its commit
    assert listing(tmp_path) == before


def test_a_command_says_once_that_the_backup_stands_in(tmp_path: Path) -> None:
    # table show and table read --begin read the file twice, and so said it twice; a compaction nine times
    from tests.support.cli import tidemark
    from tests.support.table_builder import TableBuilder

    table = TableBuilder(LocalStorage(tmp_path))
    first = table.insert(["a", "b"], 1)
    (tmp_path / ".hoodie" / "hoodie.properties").rename(tmp_path / ".hoodie" / "hoodie.properties.backup")
    warning = (
        f"{tmp_path}/.hoodie/hoodie.properties does not exist; "
        f"reading {tmp_path}/.hoodie/hoodie.properties.backup instead, as Apache Hudi does"
    )
    for args in (
        ["table", "show", str(tmp_path)],
        ["table", "read", str(tmp_path), "--begin", "000"],
        ["table", "read", str(tmp_path), "--as-of", first],
        ["archive", str(tmp_path), "--dry-run"],
        ["clean", str(tmp_path)],
        ["compact", str(tmp_path), "--engine", "local"],
    ):
        run = tidemark(*args)
        assert run.returncode == 0, (args, run.stderr)
        assert run.stderr.count(warning) == 1, (args, run.stderr)


def test_a_long_lived_process_is_told_again_when_the_backup_stands_in_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # a service was told once in its life: a second breakage of the table, days later, was silent
    storage = LocalStorage(tmp_path)
    storage.write(P.PROPERTIES_PATH, _props().to_text().encode())
    main, backup = tmp_path / P.PROPERTIES_PATH, tmp_path / P.BACKUP_PATH
    for _ in range(2):
        main.rename(backup)
        P.read_properties(storage)
        P.read_properties(storage)  # the same command's next step: not told twice
        backup.rename(main)
        P.read_properties(storage)  # repaired
    told = [r for r in caplog.records if "reading" in r.getMessage() and "backup" in r.getMessage()]
    assert len(told) == 2, [r.getMessage() for r in told]


def test_the_backup_stands_in_only_where_hudi_could_not_load_the_file(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path)
    storage.write(P.BACKUP_PATH, _props().to_text().encode())
    storage.write(P.PROPERTIES_PATH, _props(**{P.TABLE_TYPE: "merge_on_read"}).to_text().encode())
    with pytest.raises(InvalidTablePropertiesError, match="'merge_on_read' is not a Hudi table type"):
        P.read_properties(storage)
    storage.write(P.PROPERTIES_PATH, _props().to_text().replace("hoodie.table.version=6\n", "").encode())
    with pytest.raises(InvalidTablePropertiesError, match=r"table version \(none\)"):
        P.read_properties(storage)
    # a file Hudi cannot load (a malformed escape; a checksum without a name) falls back
    storage.write(P.PROPERTIES_PATH, _props().to_text().encode() + b"k=\\u12\n")
    assert P.read_properties(storage).name == "trips"
    storage.write(P.PROPERTIES_PATH, _props().to_text().replace("hoodie.table.name=trips\n", "").encode())
    assert P.read_properties(storage).name == "trips"


@pytest.mark.parametrize("cut", ["", "hoodie.table.name", "hoodie.table.version"])
def test_a_file_cut_short_is_read_from_the_backup(tmp_path: Path, cut: str) -> None:
    """An update streamed and killed (Apache's modify deletes the file, then writes it anew)
    leaves a file without a checksum line: every command failed with 'has no
    hoodie.table.name', the sound backup beside it unread."""
    storage = LocalStorage(tmp_path)
    text = _props().to_text()
    storage.write(P.BACKUP_PATH, text.encode())
    # cut before that key's line (or at once), so before the checksum, which comes last
    assert text.rstrip("\n").rsplit("\n", 1)[-1].startswith("hoodie.table.checksum=")
    kept = text[: text.index(cut)] if cut else ""
    storage.write(P.PROPERTIES_PATH, kept.encode())
    assert P.read_properties(storage).name == "trips"
    storage.delete(P.BACKUP_PATH)
    with pytest.raises(InvalidTablePropertiesError, match=r"has no hoodie\.table\.(name|version)"):
        P.read_properties(storage)


def test_a_rewrite_leaves_no_backup_for_a_later_damaged_file_to_bring_back(tmp_path: Path) -> None:
    """tidemark's rewrites left the old backup in place: when the file was later damaged, the
    backup brought back a metadata table that had been deleted."""
    from tidemark.table.metadata_table import disable_metadata_table

    storage = LocalStorage(tmp_path)
    listed = _props(**{P.METADATA_PARTITIONS: "files", P.METADATA_PARTITIONS_INFLIGHT: ""})
    storage.write(P.BACKUP_PATH, listed.to_text().encode())  # an Apache update cut short
    storage.write(".hoodie/metadata/files/junk", b"x")
    assert disable_metadata_table(storage)
    assert not storage.exists(P.BACKUP_PATH)
    assert P.read_properties(storage)[P.METADATA_PARTITIONS] == ""
    main = tmp_path / ".hoodie" / "hoodie.properties"
    main.write_text(re.sub(r"hoodie.table.checksum=\d+", "hoodie.table.checksum=1", main.read_text()))
    with pytest.raises(InvalidTablePropertiesError, match="checksum '1' does not match"):
        P.read_properties(storage)


def test_a_rewrite_killed_at_any_step_leaves_the_old_or_the_new_properties(tmp_path: Path) -> None:
    """Killed at each of its storage calls, a rewrite of the file (here merge_update's mark) leaves
    the old properties or the new ones, in the file and in the backup, and never the older backup
    that was left beside the file before it began."""
    from tests.support.faults import FaultyStorage, InjectedFaultError
    from tidemark.table.write_client import EXPRESSION_BLOCKS_PROPERTY, mark_expression_blocks

    old = _props()
    new = {**old.entries, EXPRESSION_BLOCKS_PROPERTY: "true"}
    stale = _props(**{P.METADATA_PARTITIONS: "files"})

    def start(folder: Path) -> FaultyStorage:
        storage = FaultyStorage(LocalStorage(folder))
        storage.write(P.PROPERTIES_PATH, old.to_text().encode())
        storage.write(P.BACKUP_PATH, stale.to_text().encode())
        storage.mutations = 0
        return storage

    whole = start(tmp_path / "whole")
    mark_expression_blocks(whole)
    assert dict(P.read_properties(whole)) == new
    assert not whole.exists(P.BACKUP_PATH)
    steps = whole.mutations
    assert steps == 3  # backup of the file read, the new file, the backup deleted

    for n in range(1, steps + 1):
        storage = start(tmp_path / f"killed-{n}")
        storage.arm(n)
        with pytest.raises(InjectedFaultError):
            mark_expression_blocks(storage)
        storage.disarm()
        assert dict(P.read_properties(storage)) in (dict(old), new), n
        if n == 1:
            continue  # killed before its first change: the table as it was
        for path in (P.PROPERTIES_PATH, P.BACKUP_PATH):
            if storage.exists(path):
                assert P.parse_properties(storage.read(path).decode()) in (dict(old), new), (n, path)


def test_errors_say_what_is_wrong_with_the_backup_and_name_a_byte_order_mark(tmp_path: Path) -> None:
    """With the file missing and its backup unusable, the error said only that the file did not
    exist; a byte-order mark before the first key gave "has no hoodie.table.name"."""
    storage = LocalStorage(tmp_path)
    main, backup = storage.full_uri(P.PROPERTIES_PATH), storage.full_uri(P.BACKUP_PATH)
    damaged = re.sub(r"hoodie.table.checksum=\d+", "hoodie.table.checksum=2", _props().to_text())
    storage.write(P.BACKUP_PATH, damaged.encode())
    expected = f"{main} does not exist, and {backup}: checksum '2' does not match"
    with pytest.raises(InvalidTablePropertiesError, match=re.escape(expected)):
        P.read_properties(storage)
    storage.write(P.BACKUP_PATH, b"")
    with pytest.raises(InvalidTablePropertiesError, match=re.escape(f"{main} does not exist, and {backup} has no")):
        P.read_properties(storage)
    storage.delete(P.BACKUP_PATH)

    # as Java's Properties, the mark is not skipped: it is named
    text = "".join(line + "\n" for line in _props().to_text().splitlines() if not line.startswith("#"))
    storage.write(P.PROPERTIES_PATH, b"\xef\xbb\xbf" + text.encode())
    with pytest.raises(
        InvalidTablePropertiesError, match=f"{re.escape(main)} has no hoodie.table.name: .*byte-order mark"
    ):
        P.read_properties(storage)


@pytest.mark.parametrize(
    ("folder", "reserved"),
    [
        ("metadata", ".hoodie/metadata"),
        ("./metadata/", ".hoodie/metadata"),
        ("metadata/archived", ".hoodie/metadata"),
        (".temp", ".hoodie/.temp"),
        ("x/../.temp", ".hoodie/.temp"),
        ("history/../metadata/archived", ".hoodie/metadata"),
        (".heartbeat", ".hoodie/.heartbeat"),
        (".locks", ".hoodie/.locks"),
        (".claims", ".hoodie/.claims"),
    ],
)
def test_an_archivelog_folder_kept_for_something_else_is_named(tmp_path: Path, folder: str, reserved: str) -> None:
    """The metadata table's folder is deleted whole when the metadata table is disabled; the
    others are tidemark's upkeep's: an archive there could be deleted. The table still reads (as
    Apache's readers read it); what changes it is refused (tests/cli/test_metadata_table_guard.py)."""
    storage = LocalStorage(tmp_path)
    P.write_properties(storage, _props(**{P.ARCHIVELOG_FOLDER: folder}), create=True)
    message = P.archive_folder_conflict(P.read_properties(storage))
    assert message is not None
    assert "\n" not in message
    assert f"hoodie.archivelog.folder={folder!r} " in message
    assert f"puts the archived timeline in {reserved}/" in message
    # the folder as resolved too, where "." or ".." parts hide it
    resolved = P.read_properties(storage).archive_folder
    assert (f"(resolved: {resolved})" in message) == (resolved != f".hoodie/{folder}".rstrip("/")), message
    assert "give the archive a folder of its own (Hudi's default: archived)" in message


@pytest.mark.parametrize(
    ("folder", "where"),
    [
        ("archived", ".hoodie/archived"),
        ("", ".hoodie"),
        (".", ".hoodie"),
        ("history/metadata", ".hoodie/history/metadata"),
        ("metadata_archive", ".hoodie/metadata_archive"),
        (".temporary", ".hoodie/.temporary"),
        # Hudi's own folders, which Hudi accepts and tidemark leaves alone
        (".aux/archived", ".hoodie/.aux/archived"),
        (".schema", ".hoodie/.schema"),
    ],
)
def test_an_archivelog_folder_of_its_own_is_accepted(tmp_path: Path, folder: str, where: str) -> None:
    """Hudi's default, the old empty one (``.hoodie`` itself: it holds the reserved folders, but the
    archive files lie directly in it) and names that only look like a reserved folder."""
    storage = LocalStorage(tmp_path)
    P.write_properties(storage, _props(**{P.ARCHIVELOG_FOLDER: folder}), create=True)
    assert P.read_properties(storage).archive_folder == where
    assert P.archive_folder_conflict(P.read_properties(storage)) is None


def test_key_fields_written_with_blanks_are_the_columns_hudi_trims_them_to() -> None:
    """Apache's writer records the record key option as typed ("id, name"), and its key
    generators trim each name: tidemark looked for a column " name" and refused every write."""
    props = _props(**{P.RECORD_KEY_FIELDS: "id, name", P.PARTITION_FIELDS: " city , day"})
    assert props.record_key_fields == ("id", "name")
    assert props.partition_fields == ("city", "day")
