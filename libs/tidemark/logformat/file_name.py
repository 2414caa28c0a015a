"""Hudi file names: log files ``.{fileId}_{baseInstant}.log.{version}_{writeToken}`` and base
files ``{fileId}_{writeToken}_{instant}.{ext}``; a write token is
``{partitionId}-{stageId}-{attemptId}`` of the Spark task that wrote the file."""

from __future__ import annotations

import re
from dataclasses import dataclass

from tidemark.errors import InvalidBaseFileNameError, InvalidLogFileNameError

#: Hudi's first log version (``HoodieLogFile.LOGFILE_BASE_VERSION``).
LOG_BASE_VERSION = 1

# The file id may itself contain "_": the greedy group takes everything up to the last "_" before
# the extension, as Hudi's LOG_FILE_PATTERN does. Archive logs use extension "archive" and an
# empty base instant (".commits_.archive.1_1-0-1").
_LOG_NAME = re.compile(
    r"^\.(?P<file_id>.+)_(?P<base>[^_]*)\.(?P<ext>log|archive)\.(?P<version>\d+)"
    r"(?:_(?P<token>\d+-\d+-\d+)(?P<suffix>\.cdc)?)?$"
)
_TOKEN = re.compile(r"^(\d+)-(\d+)-(\d+)$")


@dataclass(frozen=True)
class WriteToken:
    """``{partitionId}-{stageId}-{attemptId}``: which Spark task attempt wrote a file."""

    partition_id: int
    stage_id: int
    attempt_id: int

    @classmethod
    def parse(cls, token: str) -> WriteToken:
        m = _TOKEN.match(token)
        if not m:
            raise InvalidLogFileNameError(f"not a write token (partitionId-stageId-attemptId): {token!r}")
        return cls(int(m[1]), int(m[2]), int(m[3]))

    def __str__(self) -> str:
        return f"{self.partition_id}-{self.stage_id}-{self.attempt_id}"


@dataclass(frozen=True, slots=True)
class LogFileName:
    """A parsed log file name. Orders as Hudi's ``LogFileComparator``: base instant, then version,
    then write token (as a string, absent first), then suffix."""

    file_id: str
    base_instant: str
    version: int
    write_token: str | None
    extension: str = "log"
    suffix: str = ""

    @classmethod
    def parse(cls, name: str) -> LogFileName:
        """Parse a log file's name (a bare name; directories are stripped)."""
        base = name.rsplit("/", 1)[-1]
        m = _LOG_NAME.match(base)
        if not m:
            raise InvalidLogFileNameError(
                f"not a Hudi log file name: {base!r} (expected .{{fileId}}_{{baseInstant}}.log.{{version}}_{{token}})"
            )
        return cls(
            file_id=m["file_id"],
            base_instant=m["base"],
            version=int(m["version"]),
            write_token=m["token"],
            extension=m["ext"],
            suffix=m["suffix"] or "",
        )

    @classmethod
    def is_log_file(cls, name: str) -> bool:
        return _LOG_NAME.match(name.rsplit("/", 1)[-1]) is not None

    def __post_init__(self) -> None:
        if self.version < 0:
            raise InvalidLogFileNameError(f"log version must not be negative: {self.version}")
        if not self.file_id:
            raise InvalidLogFileNameError("log file id must not be empty")
        if self.write_token is not None and not _TOKEN.match(self.write_token):
            raise InvalidLogFileNameError(f"not a write token (partitionId-stageId-attemptId): {self.write_token!r}")

    @property
    def name(self) -> str:
        token = f"_{self.write_token}" if self.write_token is not None else ""
        return f".{self.file_id}_{self.base_instant}.{self.extension}.{self.version}{token}{self.suffix}"

    def __str__(self) -> str:
        return self.name

    def sort_key(self) -> tuple[str, int, tuple[int, str], str]:
        token = (0, "") if self.write_token is None else (1, self.write_token)
        return (self.base_instant, self.version, token, self.suffix)

    def __lt__(self, other: LogFileName) -> bool:
        return self.sort_key() < other.sort_key()

    def roll_over(self, write_token: str | None = None) -> LogFileName:
        """The next log version of the same file slice (Hudi's ``HoodieLogFile.rollOver``)."""
        return LogFileName(
            self.file_id,
            self.base_instant,
            self.version + 1,
            self.write_token if write_token is None else write_token,
            self.extension,
            self.suffix,
        )


@dataclass(frozen=True, slots=True)
class BaseFileName:
    """A parsed base file name ``{fileId}_{writeToken}_{instant}.{ext}``."""

    file_id: str
    write_token: str
    instant: str
    extension: str = "parquet"

    @classmethod
    def parse(cls, name: str) -> BaseFileName:
        base = name.rsplit("/", 1)[-1]
        stem, dot, ext = base.rpartition(".")
        parts = stem.rsplit("_", 2) if dot else []
        if len(parts) != 3 or not parts[0] or not _TOKEN.match(parts[1]) or not parts[2].isdigit():
            raise InvalidBaseFileNameError(
                f"not a Hudi base file name: {base!r} (expected {{fileId}}_{{writeToken}}_{{instant}}.{{ext}})"
            )
        return cls(parts[0], parts[1], parts[2], ext)

    @property
    def name(self) -> str:
        return f"{self.file_id}_{self.write_token}_{self.instant}.{self.extension}"

    def __str__(self) -> str:
        return self.name
