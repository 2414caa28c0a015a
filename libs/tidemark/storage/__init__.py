"""Storage: one interface (:class:`Storage`), a local and an S3 implementation.

Locations are plain paths, ``file://`` URIs or ``s3://bucket/prefix``. The S3 adapter (boto3) is
imported only when an ``s3://`` location is opened, so the core never depends on it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tidemark.errors import InvalidLocationError, MissingExtraError
from tidemark.storage.base import (
    ByteSource,
    BytesSource,
    DirListing,
    FileInfo,
    FolderListing,
    SourceFile,
    Storage,
    canonical_location,
    parse_location,
    s3_key_prefix,
)
from tidemark.storage.local import LocalStorage

if TYPE_CHECKING:
    from tidemark.storage.s3 import S3Storage

__all__ = [
    "ByteSource",
    "BytesSource",
    "DirListing",
    "FileInfo",
    "FolderListing",
    "LocalStorage",
    "S3Options",
    "SourceFile",
    "Storage",
    "canonical_location",
    "open_storage",
    "split_location",
]

#: a bucket name any S3 request can carry (botocore's own check, which it reports with its regexes):
#: S3 makes new buckets of 3-63 lowercase letters, digits, dots and hyphens, but older buckets in
#: us-east-1 and some S3-compatible servers allow capitals and underscores, so only what no S3
#: server can hold is refused here; a name the server does not know is its "no such bucket".
#: ``.`` and ``..`` would reach the server as a path segment, which a proxy may resolve to another bucket.
_S3_BUCKET_NAME = re.compile(r"(?!\.\.?\Z)[A-Za-z0-9._-]{1,255}")
#: the rule above in words, for the error (not S3's rule for new buckets, which tidemark does not apply)
_S3_BUCKET_RULES = "a bucket name is at most 255 letters, digits, '.', '-' and '_', and not '.' or '..'"


@dataclass(frozen=True)
class S3Options:
    """How to reach S3. Unset fields fall back to boto3's own environment and config lookup;
    ``endpoint_url`` also reads ``TIDEMARK_S3_ENDPOINT`` (for MinIO, moto, or other S3-compatible
    endpoints)."""

    endpoint_url: str | None = None
    region: str | None = None
    access_key_id: str | None = None
    # never in a repr: options end up in logs and error messages
    secret_access_key: str | None = field(default=None, repr=False)
    #: how long one request waits to connect, and then for an answer (default: the storage's own,
    #: s3.CONNECT_TIMEOUT_S and s3.READ_TIMEOUT_S); a caller that must not wait long on an
    #: endpoint that never answers (the operator, between two looks) gives a shorter one
    timeout_s: float | None = None

    def resolved_endpoint(self) -> str | None:
        return self.endpoint_url or os.environ.get("TIDEMARK_S3_ENDPOINT") or None


def open_storage(location: str | os.PathLike[str], s3: S3Options | None = None) -> Storage:
    """A storage rooted at ``location`` (a directory path, a ``pathlib.Path``, ``file://...`` or
    ``s3://bucket/prefix``)."""
    location = os.fspath(location)
    if not location:
        raise InvalidLocationError("empty location: give a path, file://PATH or s3://BUCKET/PREFIX")
    if any(ord(c) < 0x20 or c == "\x7f" for c in location):
        raise InvalidLocationError(f"location {location!r} holds a control character")
    scheme, host, path = parse_location(location)
    if scheme in ("", "file"):
        if host not in ("", "localhost"):
            raise InvalidLocationError(f"file:// location with a host is not supported: {location}")
        return LocalStorage(path)
    if scheme in ("s3", "s3a"):
        if not host:
            raise InvalidLocationError(f"s3 location has no bucket: {location}")
        if not _S3_BUCKET_NAME.fullmatch(host):
            raise InvalidLocationError(f"{location}: invalid S3 bucket name {host!r} ({_S3_BUCKET_RULES})")
        prefix = s3_key_prefix(path)
        if prefix is None:
            raise InvalidLocationError(f"s3 location {location} climbs above its bucket: a '..' has no folder to leave")
        return s3_storage_class(f"an s3:// location ({location})")(host, prefix, s3 or S3Options(), scheme)
    raise InvalidLocationError(f"unsupported location scheme {scheme!r} in {location}: use a path, file:// or s3://")


def split_location(location: str) -> tuple[str, str]:
    """Split a file's location into (its directory's location, its name)."""
    stripped = location.rstrip("/")
    if not stripped or (stripped != location and stripped.endswith(":")):
        # "/", "" or "file:///" name no file; split, they became the current directory
        raise InvalidLocationError(f"not a file location: {location}" if location else "no file location given")
    if "/" not in stripped:
        return ".", stripped
    parent, name = stripped.rsplit("/", 1)
    if parent.endswith(":/"):
        raise InvalidLocationError(f"not a file location: {location}")
    return parent or "/", name


def s3_storage_class(what: str) -> type[S3Storage]:
    """The S3 adapter, loaded now (boto3 only when needed); :class:`MissingExtraError` naming
    ``what`` needed it when boto3 is not installed."""
    try:
        from tidemark.storage.s3 import S3Storage
    except ModuleNotFoundError as e:
        raise MissingExtraError(what, e.name, "s3") from None
    return S3Storage
