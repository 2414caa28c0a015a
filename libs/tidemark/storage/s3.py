"""S3 storage (boto3). Create-if-absent is a conditional PUT (``If-None-Match: *``), atomic on S3;
compare-and-swap is a PUT with ``If-Match`` on the ETag read, and a version is that ETag.

This module is the adapter: it is the only place that imports boto3, and no botocore exception
leaves it; every failure becomes a :class:`StorageError` (or a subclass) that names the location.
"""

from __future__ import annotations

import copy
import random
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, cast

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, HTTPClientError
from botocore.exceptions import ConnectionError as BotoConnectionError

from tidemark.errors import (
    BucketNotFoundError,
    ObjectAlreadyExistsError,
    ObjectNotFoundError,
    OutcomeUnknownError,
    StorageError,
    StorageUnreachableError,
    VersionMismatchError,
)
from tidemark.storage import S3Options
from tidemark.storage.base import ByteSource, DirListing, FileInfo, FolderListing, Storage

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import PutObjectOutputTypeDef

DEFAULT_REGION = "us-east-1"
#: The least an :class:`S3ByteSource` fetches per request; later small reads are served from it.
READ_AHEAD = 256 * 1024
#: How long one request waits to connect, and then for an answer; and how many times it is tried
#: (the first try included: botocore's ``total_max_attempts``, where its ``max_attempts`` counts retries).
#: A hung endpoint costs a call about MAX_ATTEMPTS * READ_TIMEOUT_S, plus the backoff between tries,
#: before it is reported unreachable.
CONNECT_TIMEOUT_S = 5
READ_TIMEOUT_S = 30
MAX_ATTEMPTS = 3

#: S3's own codes for a missing object, sent in the answer's XML body
_NOT_FOUND_CODES = frozenset({"NoSuchKey", "NotFound"})
#: what botocore names an error answer without a body: a 404 of this is a missing object only for a
#: HEAD (which has no body); to a GET, PUT or LIST, S3 says why (NoSuchKey, NoSuchBucket), so there it
#: is another HTTP server at the endpoint (a web app or proxy on a mistyped port), not a missing file
_BARE_404 = "404"
_ALREADY_EXISTS_CODES = frozenset({"PreconditionFailed", "412"})
#: a conditional PUT found the object changed (412)
_PRECONDITION_CODES = _ALREADY_EXISTS_CODES
#: a conditional PUT raced another operation on the key (409): it decided nothing (the key may
#: even be absent, a delete having completed meanwhile), and AWS says to try it again
_CONFLICT_CODES = frozenset({"ConditionalRequestConflict", "409"})
#: how many times a conditional PUT is sent while S3 answers 409 (the first time included), and
#: the wait before the second (doubled each time after, with jitter)
CONFLICT_ATTEMPTS = 4
#: an endpoint's answer to a header it does not implement (S3-compatible stores without conditional PUTs)
_NOT_IMPLEMENTED_CODES = frozenset({"NotImplemented", "501"})
CONFLICT_BACKOFF_S = 0.05


def _error_code(e: ClientError) -> str:
    return str(e.response.get("Error", {}).get("Code", "")) or str(
        e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", "unknown")
    )


def _retried(e: ClientError) -> bool:
    """Whether botocore retried the request before this answer (so an earlier try may have landed)."""
    return int(e.response.get("ResponseMetadata", {}).get("RetryAttempts", 0)) > 0


class S3ByteSource(ByteSource):
    """Ranged GETs over one object, with a read-ahead window so that many small reads near each
    other (a reader walking block headers) cost one request, not one each."""

    def __init__(self, storage: S3Storage, path: str, size: int, etag: str | None) -> None:
        self._storage = storage
        self._rel = path
        self._etag = etag
        self.path = storage.full_uri(path)
        self.size = size
        # (start offset, bytes) of the last fetch; replaced as a whole, so readers never see a mix
        self._window: tuple[int, bytes] = (0, b"")

    def read_at(self, offset: int, length: int) -> bytes:
        if offset < 0 or length < 0:
            raise ValueError(f"negative offset or length: {offset}, {length}")
        end = min(offset + length, self.size)
        if end <= offset:
            return b""
        start, data = self._window
        if start <= offset and end <= start + len(data):
            return data[offset - start : end - start]
        fetch_end = min(offset + max(length, READ_AHEAD), self.size)
        fetched = self._storage._get_range(self._rel, offset, fetch_end - offset, if_match=self._etag)
        self._window = (offset, fetched)
        return fetched[: end - offset]

    def close(self) -> None:
        self._window = (0, b"")


class S3Storage(Storage):
    supports_append = False

    def __init__(self, bucket: str, prefix: str, options: S3Options, scheme: str = "s3") -> None:
        self.bucket = bucket
        self.scheme = scheme  # s3 or s3a: Hudi's writer of the table names its files with its base path's
        self._root_at(prefix)
        endpoint = options.resolved_endpoint()
        if (options.access_key_id is None) != (options.secret_access_key is None):
            raise StorageError(
                f"cannot open {self.uri}: give both an S3 access key id and a secret access key, or neither"
            )
        config = Config(
            retries={"total_max_attempts": MAX_ATTEMPTS, "mode": "standard"},
            connect_timeout=min(CONNECT_TIMEOUT_S, options.timeout_s or CONNECT_TIMEOUT_S),
            read_timeout=options.timeout_s or READ_TIMEOUT_S,
            # S3-compatible servers (MinIO, moto, ...) are reached by host:port, so bucket-in-path
            s3={"addressing_style": "path"} if endpoint else None,
            # checksums only where S3 demands them: many S3-compatible servers reject the rest
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        )
        try:
            session = boto3.session.Session(
                aws_access_key_id=options.access_key_id,
                aws_secret_access_key=options.secret_access_key,
            )
            region = options.region or session.region_name or DEFAULT_REGION
            self._client: S3Client = session.client("s3", endpoint_url=endpoint, region_name=region, config=config)
        except (BotoCoreError, ValueError) as e:
            where = f" at {endpoint}" if endpoint else ""
            raise StorageError(f"cannot set up an S3 client for {self.uri}{where}: {e}") from e
        self.endpoint = self._client.meta.endpoint_url

    def hadoop_path(self, path: str) -> str:
        return f"{self.scheme}://{self.bucket}/{self._key(path)}".rstrip("/")

    def _root_at(self, prefix: str) -> None:
        self.prefix = prefix.strip("/")
        self.uri = f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"
        self._key_prefix = f"{self.prefix}/" if self.prefix else ""

    def parent(self) -> S3Storage | None:
        if not self.prefix:
            return None
        up = copy.copy(self)  # one client for both
        up._root_at(self.prefix.rpartition("/")[0])
        return up

    # --- helpers ---------------------------------------------------------------------------------

    def _key(self, path: str) -> str:
        return f"{self._key_prefix}{path}"

    def _error(self, e: Exception, action: str, path: str, head: bool = False) -> StorageError:
        """The :class:`StorageError` to raise for a boto3 failure while ``action``-ing ``path``
        (by a HEAD request with ``head``)."""
        location = self.full_uri(path)
        if isinstance(e, ClientError):
            code = _error_code(e)
            if code in _NOT_FOUND_CODES or (head and code == _BARE_404):
                return ObjectNotFoundError(f"no such file: {location}")
            if code == _BARE_404:
                # every request there fails the same way: retried and reported as an endpoint at fault
                return StorageUnreachableError(
                    f"cannot {action} {location}: S3 endpoint {self.endpoint} answered 404 without an S3 error: "
                    "is it an S3 endpoint?"
                )
            if code == "NoSuchBucket":
                # the server's own name for it: an endpoint URL with a path makes it another bucket
                named = e.response.get("Error", {}).get("BucketName") or self.bucket
                return BucketNotFoundError(
                    f"cannot {action} {location}: bucket {named!r} does not exist at the S3 endpoint {self.endpoint}"
                )
            message = e.response.get("Error", {}).get("Message", "")
            detail = f" ({message})" if message else ""
            return StorageError(f"cannot {action} {location}: S3 error {code}{detail}")
        if isinstance(e, BotoConnectionError | HTTPClientError):
            return StorageUnreachableError(
                f"cannot {action} {location}: S3 endpoint {self.endpoint} is unreachable: {e}"
            )
        return StorageError(f"cannot {action} {location}: {e}")

    def _get_range(self, path: str, offset: int, length: int, if_match: str | None = None) -> bytes:
        """``length`` bytes from ``offset`` (fewer at the end, none past it); one ranged GET."""
        if offset < 0 or length < 0:
            raise ValueError(f"negative offset or length: {offset}, {length}")
        if length == 0:
            return b""
        byte_range = f"bytes={offset}-{offset + length - 1}"
        try:
            if if_match is None:
                response = self._client.get_object(Bucket=self.bucket, Key=self._key(path), Range=byte_range)
            else:
                response = self._client.get_object(
                    Bucket=self.bucket, Key=self._key(path), Range=byte_range, IfMatch=if_match
                )
            return response["Body"].read()
        except ClientError as e:
            code = _error_code(e)
            if code in ("InvalidRange", "416"):
                return b""  # the range starts at or after the end of the object
            if if_match is not None and code in ("PreconditionFailed", "412"):
                raise StorageError(f"{self.full_uri(path)} was replaced while being read (at offset {offset})") from e
            raise self._error(e, "read", path) from e
        except (BotoCoreError, OSError) as e:
            raise self._error(e, "read", path) from e

    def _conditional_put(self, path: str, data: bytes, if_match: str | None) -> PutObjectOutputTypeDef:
        """A PUT with ``If-Match: if_match`` (``If-None-Match: *`` for None), sent again with backoff
        while S3 answers 409 ConditionalRequestConflict (up to :data:`CONFLICT_ATTEMPTS` times); the
        last error otherwise."""
        retried = 0
        for attempt in range(CONFLICT_ATTEMPTS):
            try:
                if if_match is None:
                    return self._client.put_object(Bucket=self.bucket, Key=self._key(path), Body=data, IfNoneMatch="*")
                return self._client.put_object(Bucket=self.bucket, Key=self._key(path), Body=data, IfMatch=if_match)
            except ClientError as e:
                if _error_code(e) in _NOT_IMPLEMENTED_CODES:
                    raise self._no_conditional_writes(e, path, if_match) from e
                meta = cast(dict[str, Any], e.response).setdefault("ResponseMetadata", {})
                retried += int(meta.get("RetryAttempts", 0))
                if _error_code(e) not in _CONFLICT_CODES or attempt == CONFLICT_ATTEMPTS - 1:
                    # counted as botocore's own retries: an earlier try of ours may have landed too
                    meta["RetryAttempts"] = retried + attempt
                    raise
            time.sleep(CONFLICT_BACKOFF_S * 2**attempt * random.uniform(0.5, 1.5))
        raise AssertionError("unreachable")

    def _no_conditional_writes(self, e: ClientError, path: str, if_match: str | None) -> StorageError:
        action, header = ("create", "If-None-Match") if if_match is None else ("replace", "If-Match")
        message = e.response.get("Error", {}).get("Message", "")
        detail = f": {message}" if message else ""
        return StorageError(
            f"cannot {action} {self.full_uri(path)}: the S3 endpoint {self.endpoint} does not support conditional "
            f"writes (a PUT with {header} was answered {_error_code(e)}{detail}). tidemark needs them to commit "
            "atomically, claim instant times and take the table lock: use AWS S3 or an S3-compatible store that "
            "supports If-None-Match and If-Match on PUT"
        )

    def _holds(self, path: str, data: bytes) -> bool:
        """Whether the object at ``path`` exists and holds exactly ``data``, asked after a retried
        create found an object there; :class:`OutcomeUnknownError` when it cannot be read to tell
        (an object of ours taken for another writer's would have a landed commit reported lost)."""
        try:
            return self.read(path) == data
        except ObjectNotFoundError:
            return False
        except StorageError as e:
            raise OutcomeUnknownError(
                f"cannot tell whether creating {self.full_uri(path)} landed: its answer was lost, the retry found "
                f"the object there, and reading it to tell whose it is failed: {e}"
            ) from e

    def _head(self, path: str) -> tuple[int, str | None]:
        """(size, etag) of the object. Raises :class:`ObjectNotFoundError`."""
        try:
            response = self._client.head_object(Bucket=self.bucket, Key=self._key(path))
        except (ClientError, BotoCoreError) as e:
            raise self._error(e, "stat", path, head=True) from e
        return response["ContentLength"], response.get("ETag")

    # --- Storage ---------------------------------------------------------------------------------

    def read(self, path: str) -> bytes:
        try:
            response = self._client.get_object(Bucket=self.bucket, Key=self._key(path))
            return response["Body"].read()
        except (ClientError, BotoCoreError, OSError) as e:
            raise self._error(e, "read", path) from e

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        return self._get_range(path, offset, length)

    def write(self, path: str, data: bytes) -> None:
        try:
            self._client.put_object(Bucket=self.bucket, Key=self._key(path), Body=data)
        except (ClientError, BotoCoreError) as e:
            raise self._error(e, "write", path) from e

    def create_if_absent(self, path: str, data: bytes) -> None:
        try:
            self._conditional_put(path, data, None)
        except ClientError as e:
            if _error_code(e) in _ALREADY_EXISTS_CODES:
                if _retried(e) and self._holds(path, data):
                    # our first attempt landed but its answer was lost; the retry then saw our object
                    return
                raise ObjectAlreadyExistsError(f"already exists: {self.full_uri(path)}") from e
            raise self._error(e, "create", path) from e
        except BotoCoreError as e:
            raise self._error(e, "create", path) from e

    def read_versioned(self, path: str) -> tuple[bytes, str]:
        try:
            # one GET: the ETag is that of the very bytes in its body
            response = self._client.get_object(Bucket=self.bucket, Key=self._key(path))
            data = response["Body"].read()
        except (ClientError, BotoCoreError, OSError) as e:
            raise self._error(e, "read", path) from e
        return data, self._etag_of(response.get("ETag"), "read", path)

    def _etag_of(self, etag: str | None, action: str, path: str) -> str:
        if not etag:  # some S3-compatible servers omit it; without it there is nothing to compare
            raise StorageError(
                f"cannot {action} {self.full_uri(path)} conditionally: the S3 endpoint {self.endpoint} returned no ETag"
            )
        return etag

    def _landed_version(self, path: str, data: bytes) -> str | None:
        """The version of the object at ``path`` if it holds exactly ``data``, else None."""
        try:
            found, version = self.read_versioned(path)
        except StorageError:
            return None
        return version if found == data else None

    def write_if_match(self, path: str, data: bytes, expected_version: str | None) -> str:
        where = self.full_uri(path)
        try:
            response = self._conditional_put(path, data, expected_version)
        except ClientError as e:
            code = _error_code(e)
            # If-Match on a missing key answers 404: the object is gone, a mismatch as well
            refused = code in _PRECONDITION_CODES or (expected_version is not None and code in _NOT_FOUND_CODES)
            if not refused:
                raise self._error(e, "write", path) from e
            if _retried(e):
                # botocore retried: a first try may have landed and been met by the retry's check
                landed = self._landed_version(path, data)
                if landed is not None:
                    return landed
            if expected_version is None:
                raise ObjectAlreadyExistsError(f"already exists: {where}") from e
            raise VersionMismatchError(
                f"cannot replace {where}: it changed or is gone (S3 {code}; expected ETag {expected_version})"
            ) from e
        except BotoCoreError as e:
            raise self._error(e, "write", path) from e
        return self._etag_of(response.get("ETag"), "write", path)

    def modified_ms(self, path: str) -> int:
        try:
            response = self._client.head_object(Bucket=self.bucket, Key=self._key(path))
        except (ClientError, BotoCoreError) as e:
            raise self._error(e, "stat", path, head=True) from e
        modified = response.get("LastModified")
        if modified is None:
            raise StorageError(
                f"cannot stat {self.full_uri(path)}: the S3 endpoint {self.endpoint} sent no Last-Modified"
            )
        return int(modified.timestamp() * 1000)

    def list(self, prefix: str = "", recursive: bool = True) -> Iterator[FileInfo]:
        found: list[FileInfo] = []
        strip = len(self._key_prefix)
        try:
            paginator = self._client.get_paginator("list_objects_v2")
            # without recursion, keys below the next "/" fold into CommonPrefixes, which are skipped
            pages = (
                paginator.paginate(Bucket=self.bucket, Prefix=self._key(prefix))
                if recursive
                else paginator.paginate(Bucket=self.bucket, Prefix=self._key(prefix), Delimiter="/")
            )
            for page in pages:
                for obj in page.get("Contents", []):
                    key = obj.get("Key", "")
                    if key.endswith("/"):
                        continue  # a "folder" marker some tools create, not a file
                    found.append(FileInfo(key[strip:], obj.get("Size", 0)))
        except (ClientError, BotoCoreError) as e:
            raise self._error(e, "list", prefix) from e
        return iter(sorted(found))

    def list_dir(self, folder: str) -> DirListing:
        listing = self.list_folder(folder)  # one request either way: S3 sends the sizes too
        return DirListing(listing.folders, tuple(f.path.rpartition("/")[2] for f in listing.files))

    def list_folder(self, folder: str) -> FolderListing:
        prefix = self._key(f"{folder.rstrip('/')}/" if folder else "")
        strip = len(self._key_prefix)
        folders: list[str] = []
        files: list[FileInfo] = []
        try:
            paginator = self._client.get_paginator("list_objects_v2")
            for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix, Delimiter="/"):
                for common in page.get("CommonPrefixes", []):
                    folders.append(common.get("Prefix", "")[len(prefix) :].rstrip("/"))
                for obj in page.get("Contents", []):
                    key = obj.get("Key", "")
                    if key[len(prefix) :]:  # not the folder's own marker object, if a tool made one
                        files.append(FileInfo(key[strip:], obj.get("Size", 0)))
        except (ClientError, BotoCoreError) as e:
            raise self._error(e, "list", folder) from e
        return FolderListing(tuple(sorted(folders)), tuple(sorted(files)))

    def list_names(self, folder: str, prefixes: tuple[str, ...]) -> tuple[str, ...]:
        # one listing per prefix: S3 returns only the keys that start with it
        base = self._key(f"{folder.rstrip('/')}/" if folder else "")
        names: set[str] = set()
        try:
            paginator = self._client.get_paginator("list_objects_v2")
            for prefix in prefixes:
                for page in paginator.paginate(Bucket=self.bucket, Prefix=base + prefix, Delimiter="/"):
                    names.update(obj.get("Key", "")[len(base) :] for obj in page.get("Contents", []))
        except (ClientError, BotoCoreError) as e:
            raise self._error(e, "list", folder) from e
        names.discard("")
        return tuple(sorted(names))

    def delete(self, path: str) -> None:
        try:
            self._client.delete_object(Bucket=self.bucket, Key=self._key(path))
        except ClientError as e:
            if _error_code(e) in _NOT_FOUND_CODES:
                return
            raise self._error(e, "delete", path) from e
        except BotoCoreError as e:
            raise self._error(e, "delete", path) from e

    def exists(self, path: str) -> bool:
        try:
            self._head(path)
        except ObjectNotFoundError:
            return False
        return True

    def size(self, path: str) -> int:
        return self._head(path)[0]

    def open_input(self, path: str) -> ByteSource:
        try:
            size, etag = self._head(path)
        except ObjectNotFoundError:
            # a user who names a folder should hear so, as on local disk; asked only on this error path
            if path and self._is_folder(path):
                raise StorageError(f"is a folder, not a file: {self.full_uri(path)}") from None
            raise
        return S3ByteSource(self, path, size, etag)

    def _is_folder(self, path: str) -> bool:
        try:
            response = self._client.list_objects_v2(
                Bucket=self.bucket, Prefix=self._key(f"{path.rstrip('/')}/"), MaxKeys=1
            )
        except (ClientError, BotoCoreError) as e:
            error = self._error(e, "read", path)
            if isinstance(error, BucketNotFoundError):  # a HEAD's 404 says no more than "no such file"
                raise error from e
            return False  # the caller's "no such file" stays the answer
        return bool(response.get("KeyCount") or response.get("Contents"))
