"""``.hoodie/hoodie.properties``: the table's configuration, as Hudi writes and checks it.

Java properties format (``key=value``, ``:``/``=`` escaped with a backslash, ``#`` comments). The
``hoodie.table.checksum`` is the CRC32 of ``"{database}.{table}"`` (Hudi's ``generateChecksum``);
a file whose checksum disagrees is refused, as Hudi refuses it.
"""

from __future__ import annotations

import datetime
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from tidemark.errors import InvalidTablePropertiesError, ObjectNotFoundError, TableNotFoundError
from tidemark.storage.base import Storage

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
#: the metadata table's partitions that are ready (``files``, ``column_stats``, ...) and those
#: being built; Apache's readers use the metadata table while ``files`` is ready
METADATA_PARTITIONS = "hoodie.table.metadata.partitions"
METADATA_PARTITIONS_INFLIGHT = "hoodie.table.metadata.partitions.inflight"
CREATE_SCHEMA = "hoodie.table.create.schema"


def table_checksum(database: str, table: str) -> int:
    return zlib.crc32(f"{database}.{table}".encode())


def _unescape(text: str) -> str:
    out, i = [], 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            out.append({"n": "\n", "t": "\t", "r": "\r"}.get(nxt, nxt))
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _escape(text: str, is_key: bool = False) -> str:
    out = []
    for ch in text:
        if ch in ":=#!\\" or (is_key and ch == " "):
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        else:
            out.append(ch)
    return "".join(out)


def parse_properties(text: str) -> dict[str, str]:
    props: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        i, key_end = 0, None
        while i < len(line):
            if line[i] == "\\":
                i += 2
                continue
            if line[i] in "=:":
                key_end = i
                break
            i += 1
        if key_end is None:
            props[_unescape(line)] = ""
        else:
            props[_unescape(line[:key_end].strip())] = _unescape(line[key_end + 1 :].strip())
    return props


@dataclass(frozen=True)
class TableProperties(Mapping[str, str]):
    """The properties of one table; a read-only mapping with typed accessors."""

    entries: Mapping[str, str]

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
        return tuple(f for f in self.entries.get(RECORD_KEY_FIELDS, "").split(",") if f)

    @property
    def precombine_field(self) -> str | None:
        return self.entries.get(PRECOMBINE_FIELD) or None

    @property
    def partition_fields(self) -> tuple[str, ...]:
        return tuple(f for f in self.entries.get(PARTITION_FIELDS, "").split(",") if f)

    @property
    def hive_style_partitioning(self) -> bool:
        return self.entries.get(HIVE_STYLE, "false").lower() == "true"

    @property
    def url_encode_partitions(self) -> bool:
        return self.entries.get(URL_ENCODE, "false").lower() == "true"

    @property
    def key_generator_class(self) -> str | None:
        return self.entries.get(KEY_GENERATOR) or None

    @property
    def populate_meta_fields(self) -> bool:
        return self.entries.get(POPULATE_META_FIELDS, "true").lower() == "true"

    @property
    def payload_class(self) -> str:
        return self.entries.get(PAYLOAD_CLASS, "org.apache.hudi.common.model.OverwriteWithLatestAvroPayload")

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
        props.setdefault("hoodie.archivelog.folder", "archived")
        props[CHECKSUM] = str(table_checksum(props.get(DATABASE, ""), props[NAME]))
        return cls(props)


def read_properties(storage: Storage) -> TableProperties:
    """The table's properties. Raises :class:`TableNotFoundError` when there is no table."""
    try:
        text = storage.read(PROPERTIES_PATH).decode("utf-8")
    except ObjectNotFoundError as e:
        raise TableNotFoundError(f"not a Hudi table: {storage.full_uri(PROPERTIES_PATH)} does not exist") from e
    except UnicodeDecodeError as e:
        raise InvalidTablePropertiesError(f"{storage.full_uri(PROPERTIES_PATH)} is not UTF-8 text: {e}") from e
    props = parse_properties(text)
    where = storage.full_uri(PROPERTIES_PATH)
    if NAME not in props:
        raise InvalidTablePropertiesError(f"{where} has no {NAME}")
    version = props.get(TABLE_VERSION, "")
    if version != SUPPORTED_TABLE_VERSION:
        raise InvalidTablePropertiesError(
            f"{where}: table version {version or '(none)'} is not supported (tidemark reads version 6)"
        )
    if props.get(TABLE_TYPE, COPY_ON_WRITE) not in TABLE_TYPES:
        raise InvalidTablePropertiesError(
            f"{where}: {TABLE_TYPE}={props[TABLE_TYPE]} is not a Hudi table type ({' or '.join(TABLE_TYPES)})"
        )
    if CHECKSUM in props:
        expected = table_checksum(props.get(DATABASE, ""), props[NAME])
        if props[CHECKSUM] != str(expected):
            raise InvalidTablePropertiesError(
                f"{where}: checksum {props[CHECKSUM]} does not match {expected} for the table name"
            )
    return TableProperties(props)


def write_properties(storage: Storage, props: TableProperties, create: bool = False) -> None:
    data = props.to_text().encode()
    if create:
        storage.create_if_absent(PROPERTIES_PATH, data)
    else:
        storage.write(PROPERTIES_PATH, data)
