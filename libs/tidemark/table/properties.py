"""``.hoodie/hoodie.properties``: the table's configuration, as Hudi writes and checks it.

Java properties format, read and written by ``java.util.Properties``' rules (``key=value``, ``key:value``
or ``key value``; backslash escapes, ``\\uXXXX`` for every non-ASCII character; ``#`` comments). The
``hoodie.table.checksum`` is the CRC32 of ``"{database}.{table}"`` (Hudi's ``generateChecksum``);
a file whose checksum disagrees is refused, as Hudi refuses it.
"""

from __future__ import annotations

import datetime
import logging
import re
import time
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from tidemark.config import comma_fields
from tidemark.errors import (
    InvalidTablePropertiesError,
    ObjectNotFoundError,
    StorageError,
    TableNotFoundError,
    UnsupportedTableFeatureError,
)
from tidemark.storage.base import Storage, canonical_location, require_storage, resolved_segments
from tidemark.table.heartbeat import HEARTBEAT_FOLDER
from tidemark.table.lock import LOCK_FOLDER
from tidemark.table.markers import TEMP_FOLDER
from tidemark.timeline.active import CLAIM_FOLDER

log = logging.getLogger(__name__)

PROPERTIES_PATH = ".hoodie/hoodie.properties"
SUPPORTED_TABLE_VERSION = "6"

NAME = "hoodie.table.name"
DATABASE = "hoodie.database.name"
TABLE_TYPE = "hoodie.table.type"
COPY_ON_WRITE = "COPY_ON_WRITE"
MERGE_ON_READ = "MERGE_ON_READ"
TABLE_TYPES = (COPY_ON_WRITE, MERGE_ON_READ)
TABLE_VERSION = "hoodie.table.version"
TIMELINE_LAYOUT = "hoodie.timeline.layout.version"
#: the time zone of the table's instant times: Hudi's default is LOCAL (each writer's own), and
#: tidemark stamps UTC, so the tables it creates say UTC for Apache's writers to stamp it too
TIMELINE_TIMEZONE = "hoodie.table.timeline.timezone"
RECORD_KEY_FIELDS = "hoodie.table.recordkey.fields"
PRECOMBINE_FIELD = "hoodie.table.precombine.field"
PARTITION_FIELDS = "hoodie.table.partition.fields"
HIVE_STYLE = "hoodie.datasource.write.hive_style_partitioning"
POPULATE_META_FIELDS = "hoodie.populate.meta.fields"
PAYLOAD_CLASS = "hoodie.compaction.payload.class"
#: Hudi 1.x: COMMIT_TIME_ORDERING, EVENT_TIME_ORDERING or CUSTOM (then the strategy id says how)
RECORD_MERGE_MODE = "hoodie.record.merge.mode"
RECORD_MERGE_STRATEGY_ID = "hoodie.record.merge.strategy.id"
#: Hudi 0.14/0.15: the record merger strategy compaction uses (the default UUID means "the payload")
RECORD_MERGER_STRATEGY = "hoodie.compaction.record.merger.strategy"
BASE_FILE_FORMAT = "hoodie.table.base.file.format"
KEY_GENERATOR = "hoodie.table.keygenerator.class"
CHECKSUM = "hoodie.table.checksum"
URL_ENCODE = "hoodie.datasource.write.partitionpath.urlencode"
#: new partitions' metafiles in the base file format (``.hoodie_partition_metadata.parquet``)
PARTITION_METAFILE_USE_BASE_FORMAT = "hoodie.partition.metafile.use.base.format"
#: the metadata table's partitions that are ready (``files``, ``column_stats``, ...) and those
#: being built; Apache's readers use the metadata table while ``files`` is ready
METADATA_PARTITIONS = "hoodie.table.metadata.partitions"
METADATA_PARTITIONS_INFLIGHT = "hoodie.table.metadata.partitions.inflight"
#: the metadata table's own table folder (Hudi's ``METADATA_TABLE_FOLDER_PATH``)
METADATA_FOLDER = ".hoodie/metadata"
CREATE_SCHEMA = "hoodie.table.create.schema"
#: the archived timeline's folder inside ``.hoodie`` (Hudi's ``getArchivePath``); ``archived`` when missing
ARCHIVELOG_FOLDER = "hoodie.archivelog.folder"
DEFAULT_ARCHIVELOG_FOLDER = "archived"
#: the folders in ``.hoodie`` whose upkeep by tidemark deletes or lists files, and what they are:
#: an archive there could be deleted (disabling the metadata table deletes its folder, for one), so
#: changes are refused while the archive folder is one of them or lies inside one. Reads go on, as
#: Apache's do; Hudi's own folders (``.aux``, ``.schema``) tidemark leaves alone, so they pass.
RESERVED_FOLDERS: Mapping[str, str] = MappingProxyType(
    {
        METADATA_FOLDER: "the metadata table's folder (disabling the metadata table deletes it whole)",
        TEMP_FOLDER: "the write markers' folder",
        HEARTBEAT_FOLDER: "the writers' heartbeats' folder",
        LOCK_FOLDER: "the table lock's folder",
        CLAIM_FOLDER: "tidemark's instant-time claims' folder",
    }
)


def table_checksum(database: str, table: str) -> int:
    return zlib.crc32(f"{database}.{table}".encode())


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_ESCAPE_LETTERS = {char: letter for letter, char in _ESCAPES.items()}
#: a key (up to the first unescaped ``=``, ``:`` or blank), then blanks, one ``=`` or ``:``, blanks:
#: what Java's ``Properties.load`` takes as the key and what separates it from the value
_LINE_END = re.compile(r"\r\n|\r|\n")
_KEY = re.compile(r"(?P<key>(?:\\.|\\$|[^=: \t\f\\])*)[ \t\f]*[=:]?[ \t\f]*", re.DOTALL)
#: one escape: \\uXXXX, a \\u without four hex digits (malformed), or a backslash before any character
_ESCAPE = re.compile(r"\\(?:u(?P<hex>[0-9a-fA-F]{4})|(?P<u>u)|(?P<ch>.))", re.DOTALL)


def _unescape(text: str, where: str) -> str:
    """Java's escapes: ``\\t \\n \\r \\f``, ``\\uXXXX`` (as ``Properties.store`` writes every
    character outside printable ASCII; a pair of them for a character past U+FFFF), any other
    character after a backslash stands for itself."""
    if "\\" not in text:  # most values: the file is read several times per command
        return text

    def one(m: re.Match[str]) -> str:
        if m["hex"]:
            return chr(int(m["hex"], 16))
        if m["u"]:
            raise InvalidTablePropertiesError(f"{where}: malformed \\uXXXX escape {text[m.start() : m.start() + 6]!r}")
        return _ESCAPES.get(m["ch"], m["ch"])

    out = _ESCAPE.sub(one, text)
    try:  # two \\u escapes of a UTF-16 surrogate pair are one character, as in Java
        return out.encode("utf-16", "surrogatepass").decode("utf-16")
    except UnicodeDecodeError:
        raise InvalidTablePropertiesError(f"{where}: a \\uXXXX escape is half a surrogate pair in {text!r}") from None


def _escape(text: str, is_key: bool = False) -> str:
    """As Java's ``Properties.store``: ASCII only, so that Hudi (which loads the file as
    ISO-8859-1) reads back the same text."""
    out = []
    for n, ch in enumerate(text):
        if ch in "=:#!\\" or (ch == " " and (is_key or n == 0)):
            out.append("\\" + ch)
        elif ch in _ESCAPE_LETTERS:
            out.append("\\" + _ESCAPE_LETTERS[ch])
        elif " " <= ch <= "~":
            out.append(ch)
        else:
            units = ch.encode("utf-16-be", "surrogatepass")
            out += [f"\\u{units[k]:02X}{units[k + 1]:02X}" for k in range(0, len(units), 2)]
    return "".join(out)


def _logical_lines(text: str) -> Iterator[str]:
    # a line ending in an odd number of backslashes goes on, past its leading blanks, on the next
    pending = ""
    for raw in _LINE_END.split(text):  # Java ends lines at these only (str.splitlines also at \f, \v, U+2028 ...)
        line = raw.lstrip(" \t\f")
        if not pending and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            pending += line[:-1]
            continue
        yield pending + line
        pending = ""
    if pending:
        yield pending


def parse_properties(text: str, where: str = PROPERTIES_PATH) -> dict[str, str]:
    """Java's ``Properties.load`` rules: the key ends at the first unescaped ``=``, ``:`` or blank;
    blanks and then one ``=`` or ``:`` separate it from the value."""
    props: dict[str, str] = {}
    for line in _logical_lines(text):
        key_and_separator = _KEY.match(line)
        assert key_and_separator is not None  # every part of the pattern may be empty
        props[_unescape(key_and_separator["key"], where)] = _unescape(line[key_and_separator.end() :], where)
    return props


@dataclass(frozen=True)
class TableProperties(Mapping[str, str]):
    """The properties of one table; a read-only mapping with typed accessors."""

    entries: Mapping[str, str]

    def __post_init__(self) -> None:
        # a copy behind a read-only view: a caller's edit would change what this object's
        # accessors (and a later write of it) say, or the caller's dict this one's
        object.__setattr__(self, "entries", MappingProxyType(dict(self.entries)))

    def __getitem__(self, key: str) -> str:
        return self.entries[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    @property
    def name(self) -> str:
        return self.entries[NAME]

    @property
    def table_type(self) -> str:
        return self.entries.get(TABLE_TYPE, COPY_ON_WRITE)

    @property
    def is_merge_on_read(self) -> bool:
        return self.table_type == MERGE_ON_READ

    @property
    def record_key_fields(self) -> tuple[str, ...]:
        # Apache's writer records the option as typed ("id, name"); its key generators trim the names
        return comma_fields(self.entries.get(RECORD_KEY_FIELDS, "")) or ()

    @property
    def precombine_field(self) -> str | None:
        return self.entries.get(PRECOMBINE_FIELD) or None

    @property
    def partition_fields(self) -> tuple[str, ...]:
        return comma_fields(self.entries.get(PARTITION_FIELDS, "")) or ()

    @property
    def hive_style_partitioning(self) -> bool:
        return self.entries.get(HIVE_STYLE, "false").lower() == "true"

    @property
    def url_encode_partitions(self) -> bool:
        return self.entries.get(URL_ENCODE, "false").lower() == "true"

    @property
    def partition_metafile_use_base_format(self) -> bool:
        return self.entries.get(PARTITION_METAFILE_USE_BASE_FORMAT, "false").lower() == "true"

    @property
    def key_generator_class(self) -> str | None:
        return self.entries.get(KEY_GENERATOR) or None

    @property
    def populate_meta_fields(self) -> bool:
        return self.entries.get(POPULATE_META_FIELDS, "true").lower() == "true"

    @property
    def payload_class(self) -> str:
        return self.entries.get(PAYLOAD_CLASS, "org.apache.hudi.common.model.OverwriteWithLatestAvroPayload")

    @property
    def archive_folder(self) -> str:
        """The archived timeline's folder, relative to the table root: ``.hoodie/<hoodie.archivelog.folder>``
        (an empty value is ``.hoodie`` itself, as Hudi joins the paths)."""
        folder = self.entries.get(ARCHIVELOG_FOLDER, DEFAULT_ARCHIVELOG_FOLDER)
        archive = _archive_path(folder)
        if archive is None:
            raise InvalidTablePropertiesError(_leads_out(folder))
        return archive

    def to_text(self, now: datetime.datetime | None = None) -> str:
        now = now or datetime.datetime.now(datetime.UTC)
        lines = [f"#Properties saved on {now.isoformat().replace('+00:00', 'Z')}", f"#{now:%a %b %d %H:%M:%S UTC %Y}"]
        lines += [f"{_escape(k, True)}={_escape(v)}" for k, v in self.entries.items()]
        return "\n".join(lines) + "\n"

    @classmethod
    def create(cls, values: Mapping[str, str]) -> TableProperties:
        """Properties for a new table, with the checksum Hudi expects."""
        if NAME not in values:
            raise InvalidTablePropertiesError(f"a table needs {NAME}")
        props = dict(values)
        props.setdefault(TABLE_VERSION, SUPPORTED_TABLE_VERSION)
        props.setdefault(TIMELINE_LAYOUT, "1")
        props.setdefault(TIMELINE_TIMEZONE, "UTC")
        props.setdefault(ARCHIVELOG_FOLDER, DEFAULT_ARCHIVELOG_FOLDER)
        props[CHECKSUM] = str(table_checksum(props.get(DATABASE, ""), props[NAME]))
        return cls(props)


BACKUP_PATH = ".hoodie/hoodie.properties.backup"
#: Hudi table features whose data tidemark would misread: refused rather than read wrong
DROP_PARTITION_COLUMNS = "hoodie.datasource.write.drop.partition.columns"
BOOTSTRAP_BASE_PATH = "hoodie.bootstrap.base.path"


def read_properties(storage: Storage) -> TableProperties:
    """The table's properties. Raises :class:`TableNotFoundError` when there is no table, naming
    the table whose folder holds the location when there is one (a partition's or the ``.hoodie``
    folder given for the table's).

    As Hudi's ``fetchConfigs``: when ``hoodie.properties`` is missing or its checksum fails (an
    update of it was cut short), ``hoodie.properties.backup`` stands in for it."""
    require_storage(storage)
    try:
        return _read_table_properties(storage)
    except TableNotFoundError as e:
        above = storage.parent()
        name = canonical_location(storage.uri).rsplit("/", 1)[-1]
        if above is not None and name and _exists(above, name):
            # a file given for the table: its ".hoodie/hoodie.properties does not exist" misleads
            raise TableNotFoundError(
                f"not a Hudi table: {storage.uri} is a file; a table is the folder holding .hoodie/"
            ) from None
        enclosing = enclosing_table(storage)
        if enclosing is None:
            raise
        root, where = enclosing
        raise TableNotFoundError(f"{e}; {storage.uri} is inside the Hudi table at {root} ({where})") from None


def find_properties(storage: Storage) -> TableProperties | None:
    """The table's properties, or None where there is no table (yet: a write creates it); without
    :func:`read_properties`' look at the folders above."""
    require_storage(storage)
    try:
        return _read_table_properties(storage)
    except TableNotFoundError:
        return None


def _exists(storage: Storage, path: str) -> bool:
    try:
        return storage.exists(path)
    except StorageError:  # a folder the credentials may not read (access limited to a prefix)
        return False


def enclosing_table(storage: Storage) -> tuple[str, str] | None:
    """(location, what the folder is to it) of the nearest table whose folder holds ``storage``'s
    root: ``partition x/y`` or ``its .hoodie metadata folder``. One or two exists checks (HEADs
    on S3) per folder above the root, so only for creating a table and for an error message. A
    table whose properties file is gone but its backup there is one (Hudi reads it from that)."""
    above = storage.parent()
    while above is not None:
        if _exists(above, PROPERTIES_PATH) or _exists(above, BACKUP_PATH):
            inner = canonical_location(storage.uri).removeprefix(canonical_location(above.uri).rstrip("/") + "/")
            where = "its .hoodie metadata folder" if inner.split("/")[0] == ".hoodie" else f"partition {inner}"
            return above.uri, where
        above = above.parent()
    return None


def table_inside(storage: Storage) -> str | None:
    """The location of a table in a folder below ``storage``'s root, if any: a table made around
    it would take its folders for partitions, and every reader would return its rows as the outer
    table's. Walks the folders as the readers find partitions (linked folders too), never into a
    ``.hoodie`` folder: a listing per folder, so only for creating a table (whose folder is
    empty, or nearly)."""
    pending = [""]
    while pending:
        folder = pending.pop()
        listing = storage.list_dir(folder)
        if folder and ".hoodie" in listing.folders:
            for marker in (PROPERTIES_PATH, BACKUP_PATH):
                if storage.exists(f"{folder}/{marker}"):
                    return storage.full_uri(folder)
        pending.extend(f"{folder}/{name}" if folder else name for name in listing.folders if name != ".hoodie")
    return None


def _read_table_properties(storage: Storage) -> TableProperties:
    # as Hudi's fetchConfigs, the backup only where Hudi could not load the file itself: a sound
    # file that tidemark refuses (another table version, an unknown type) is refused, since a
    # backup left beside a sound file is older than it (Hudi deletes it at its next update)
    try:
        props = _load(storage, PROPERTIES_PATH)
        if CHECKSUM not in props and not (NAME in props and TABLE_VERSION in props):
            # a file cut short before its checksum line (an update streamed and killed): not a
            # sound file, and a backup beside it is what the update copied before it began
            where = storage.full_uri(PROPERTIES_PATH)
            raise InvalidTablePropertiesError(
                _no_name(props, where) if NAME not in props else f"{where} has no {TABLE_VERSION} and no {CHECKSUM}"
            )
    except (TableNotFoundError, InvalidTablePropertiesError) as e:
        return _read_backup(storage, e)
    if _backups_told:  # the file is sound again: a backup standing in later is news
        where = storage.full_uri(BACKUP_PATH)
        for told in [t for t in _backups_told if t[0] == where]:
            del _backups_told[told]
    return _checked(props, storage.full_uri(PROPERTIES_PATH))


#: a stand-in backup is warned of again after this long (a service's life: its log says so while
#: it lasts), and not before: a command reads the properties at several of its steps (a change
#: again under its lock), and says so once
BACKUP_WARNING_INTERVAL_S = 300.0
#: when this process last warned of each stand-in backup, with why
_backups_told: dict[tuple[str, str], float] = {}


def _read_backup(storage: Storage, main_error: TableNotFoundError | InvalidTablePropertiesError) -> TableProperties:
    where = storage.full_uri(BACKUP_PATH)
    try:
        backup = _checked(_load(storage, BACKUP_PATH), where)
    except TableNotFoundError:
        raise main_error from None
    except InvalidTablePropertiesError as e:
        # a backup is what is left of a table: the error says what is wrong with both files
        raise InvalidTablePropertiesError(f"{_unusable(main_error)}, and {e}") from None
    reason = _unusable(main_error)
    told = _backups_told.get((where, reason))
    if told is None or time.monotonic() - told >= BACKUP_WARNING_INTERVAL_S:
        _backups_told[(where, reason)] = time.monotonic()
        log.warning("%s; reading %s instead, as Apache Hudi does", reason, where)
    return backup


def _unusable(e: Exception) -> str:
    return str(e).removeprefix("not a Hudi table: ")


def _load(storage: Storage, path: str) -> dict[str, str]:
    """The file's entries where Hudi's ``fetchConfigs`` takes them as they are: raises
    :class:`TableNotFoundError` when the file is missing, :class:`InvalidTablePropertiesError`
    when it cannot be read or its checksum fails (the cases where Hudi turns to the backup)."""
    where = storage.full_uri(path)
    try:
        data = storage.read(path)
    except ObjectNotFoundError as e:
        raise TableNotFoundError(f"not a Hudi table: {where} does not exist") from e
    return _entries(data, where)


def _entries(data: bytes, where: str) -> dict[str, str]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InvalidTablePropertiesError(f"{where} is not UTF-8 text: {e}") from e
    props = parse_properties(text, where)
    if CHECKSUM in props:
        if NAME not in props:  # Hudi cannot compute the checksum, so it fails as a wrong one
            raise InvalidTablePropertiesError(_no_name(props, where))
        expected = table_checksum(props.get(DATABASE, ""), props[NAME])
        if _java_int(props[CHECKSUM]) != expected:  # Long.parseLong, as Hudi's validateChecksum
            raise InvalidTablePropertiesError(
                f"{where}: checksum {props[CHECKSUM]!r} does not match {expected} for the table name"
            )
    return props


def _no_name(props: Mapping[str, str], where: str) -> str:
    if "\ufeff" + NAME in props:
        return (
            f"{where} has no {NAME}: the file starts with a UTF-8 byte-order mark, which Java's Properties "
            "(and so Apache Hudi) reads as part of the first key; remove those three bytes"
        )
    return f"{where} has no {NAME}"


def _checked(props: dict[str, str], where: str) -> TableProperties:
    if NAME not in props:
        raise InvalidTablePropertiesError(_no_name(props, where))
    version = props.get(TABLE_VERSION)
    # read as Java's Integer.parseInt: 06 is 6, and a trailing blank fails (quoted, so it shows)
    if version is None or _java_int(version) != int(SUPPORTED_TABLE_VERSION):
        raise InvalidTablePropertiesError(
            f"{where}: table version {'(none)' if version is None else repr(version)} is not supported "
            "(tidemark reads version 6)"
        )
    layout = props.get(TIMELINE_LAYOUT)
    # Hudi 0.14 refuses a layout above 1, and reads a table without one, or with 0, as layout 1
    # (the layout its reader and writer are built with), as tidemark does
    if layout is not None and _java_int(layout) not in (0, 1):
        raise InvalidTablePropertiesError(
            f"{where}: {TIMELINE_LAYOUT}={layout!r} is not supported (table version 6 has timeline layout 1)"
        )
    if props.get(TABLE_TYPE, COPY_ON_WRITE) not in TABLE_TYPES:
        raise InvalidTablePropertiesError(
            f"{where}: {TABLE_TYPE}={props[TABLE_TYPE]!r} is not a Hudi table type ({' or '.join(TABLE_TYPES)})"
        )
    folder = props.get(ARCHIVELOG_FOLDER, DEFAULT_ARCHIVELOG_FOLDER)
    if _archive_path(folder) is None:
        raise InvalidTablePropertiesError(f"{where}: {_leads_out(folder)}")
    _check_supported(props, where)
    return TableProperties(props)


def archive_folder_conflict(props: Mapping[str, str]) -> str | None:
    """Why the archive folder ``props`` name is in one of the :data:`RESERVED_FOLDERS`, or None."""
    folder = props.get(ARCHIVELOG_FOLDER, DEFAULT_ARCHIVELOG_FOLDER)
    archive = _archive_path(folder)
    if archive is None:  # read_properties refuses it before any change gets here
        return _leads_out(folder)
    # the folder as resolved too, where "." or ".." parts make it differ from the value
    resolved = "" if archive == f".hoodie/{folder}".rstrip("/") else f" (resolved: {archive})"
    for reserved, what in RESERVED_FOLDERS.items():
        if archive == reserved or archive.startswith(f"{reserved}/"):
            return (
                f"{ARCHIVELOG_FOLDER}={folder!r}{resolved} puts the archived timeline in {reserved}/, {what}, "
                "whose upkeep could delete it; give the archive a folder of its own (Hudi's default: "
                f"{DEFAULT_ARCHIVELOG_FOLDER}) and move its files there"
            )
    return None


def _java_int(text: str) -> int | None:
    """``text`` as Java's ``Integer.parseInt`` / ``Long.parseLong`` read it (a sign, ASCII digits,
    leading zeros; no blanks), or None where they fail."""
    return int(text) if re.fullmatch(r"[+-]?[0-9]+", text) else None


def _archive_path(folder: str) -> str | None:
    """``.hoodie/<folder>`` relative to the table root, resolved as Hadoop's ``Path`` normalises it
    (Hudi's ``getArchivePath``): empty and ``.`` parts name no folder, ``..`` drops the part before it.
    None when it leads out of ``.hoodie`` (an absolute path, a URI, or more ``..`` than parts)."""
    if folder.startswith("/") or "://" in folder:
        return None
    parts = resolved_segments(f".hoodie/{folder}")
    if parts is None or parts[:1] != [".hoodie"]:
        return None
    return "/".join(parts)


def _leads_out(folder: str) -> str:
    return (
        f"{ARCHIVELOG_FOLDER}={folder!r} leads out of .hoodie; Hudi keeps the archived timeline in "
        f".hoodie/<{ARCHIVELOG_FOLDER}>"
    )


def _check_supported(props: Mapping[str, str], where: str) -> None:
    unsupported = []
    base_format = props.get(BASE_FILE_FORMAT, "PARQUET").strip().upper()
    if base_format != "PARQUET":
        unsupported.append(f"{BASE_FILE_FORMAT}={props[BASE_FILE_FORMAT]} (tidemark reads Parquet base files only)")
    if props.get(DROP_PARTITION_COLUMNS, "false").strip().lower() == "true":
        unsupported.append(
            f"{DROP_PARTITION_COLUMNS}=true (the partition columns are not in the files; tidemark would read "
            "them as missing)"
        )
    if props.get(BOOTSTRAP_BASE_PATH, "").strip():
        unsupported.append(
            f"{BOOTSTRAP_BASE_PATH}={props[BOOTSTRAP_BASE_PATH]} (a bootstrapped table: its data columns are in "
            "the source table's files, which tidemark does not read)"
        )
    if unsupported:
        raise UnsupportedTableFeatureError(
            f"{where}: the table uses what tidemark does not support: {'; '.join(unsupported)}. Nothing was read "
            "or changed; use Apache Hudi for this table"
        )


def write_properties(storage: Storage, props: TableProperties, create: bool = False) -> None:
    """Create the file, or replace it as Hudi's ``HoodieTableConfig.modify`` does: the file read
    now is copied to the backup first, then the new file is written, then the backup deleted. A
    process killed at any step leaves the old properties or the new ones to read. A process
    killed before the last step leaves the old properties as the backup until the next update
    overwrites it (Hudi's next update deletes it first): a file damaged later by anything but an
    update would be read from it, with a warning."""
    data = props.to_text().encode()
    if create:
        storage.create_if_absent(PROPERTIES_PATH, data)
        return
    storage.write(BACKUP_PATH, _current_bytes(storage))
    storage.write(PROPERTIES_PATH, data)
    storage.delete(BACKUP_PATH)


def _current_bytes(storage: Storage) -> bytes:
    """The bytes of the file the properties are read from now: the main file, or the backup
    where the main file could not be loaded."""
    for path in (PROPERTIES_PATH, BACKUP_PATH):
        try:
            data = storage.read(path)
            _entries(data, storage.full_uri(path))
            return data
        except (ObjectNotFoundError, InvalidTablePropertiesError):
            continue
    raise TableNotFoundError(f"not a Hudi table: {storage.full_uri(PROPERTIES_PATH)} does not exist")
