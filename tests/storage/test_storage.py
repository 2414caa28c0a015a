"""One contract, two storages: every test in the first part runs against LocalStorage (a temporary
directory) and S3Storage (a moto server over real HTTP, marked ``s3``)."""

from __future__ import annotations

import multiprocessing
import os
import random
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.support.processes import start_line
from tests.support.s3 import create_bucket, free_port, s3_options, start_moto_server
from tidemark.errors import (
    AppendNotSupportedError,
    InvalidLocationError,
    ObjectAlreadyExistsError,
    ObjectNotFoundError,
    StorageError,
    StorageUnreachableError,
)
from tidemark.storage import (
    FileInfo,
    LocalStorage,
    S3Options,
    Storage,
    canonical_location,
    open_storage,
    split_location,
)


def payload(n: int, seed: int = 0) -> bytes:
    return random.Random(seed).randbytes(n)


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Storage:
    if request.param == "local":
        return LocalStorage(tmp_path / "root")
    s3: Storage = request.getfixturevalue("s3_storage")
    return s3


def run_threads(n: int, target: Callable[[int], None]) -> None:
    """Run ``target(i)`` on ``n`` threads released together; re-raise the first failure."""
    barrier = threading.Barrier(n)
    failures: list[BaseException] = []

    def run(i: int) -> None:
        try:
            barrier.wait()
            target(i)
        except BaseException as e:
            failures.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    if failures:
        raise failures[0]


# --- the contract, on both storages ---------------------------------------------------------------


def test_write_read_round_trip(storage: Storage) -> None:
    data = payload(10_000)
    storage.write("f.bin", data)
    storage.write("dir/sub/nested.bin", b"nested")
    assert storage.read("f.bin") == data
    assert storage.read("dir/sub/nested.bin") == b"nested"


def test_write_replaces(storage: Storage) -> None:
    storage.write("f", b"first version, longer")
    storage.write("f", b"second")
    assert storage.read("f") == b"second"
    assert storage.size("f") == 6


def test_empty_file(storage: Storage) -> None:
    storage.write("empty", b"")
    assert storage.read("empty") == b""
    assert storage.size("empty") == 0
    assert storage.exists("empty")
    assert storage.read_range("empty", 0, 10) == b""
    with storage.open_input("empty") as source:
        assert source.size == 0
        assert source.read_at(0, 10) == b""


def test_read_range(storage: Storage) -> None:
    data = bytes(range(100))
    storage.write("r", data)
    assert storage.read_range("r", 10, 20) == data[10:30]
    assert storage.read_range("r", 0, 100) == data
    assert storage.read_range("r", 99, 1) == data[99:]
    assert storage.read_range("r", 10, 0) == b""


def test_read_range_past_end(storage: Storage) -> None:
    data = bytes(range(100))
    storage.write("r", data)
    assert storage.read_range("r", 90, 50) == data[90:]  # fewer bytes at the end
    assert storage.read_range("r", 100, 5) == b""  # starts at the end
    assert storage.read_range("r", 500, 5) == b""  # starts after the end


def test_read_range_negative(storage: Storage) -> None:
    storage.write("r", b"abc")
    with pytest.raises(ValueError, match="negative"):
        storage.read_range("r", -1, 2)
    with pytest.raises(ValueError, match="negative"):
        storage.read_range("r", 0, -2)


def test_create_if_absent(storage: Storage) -> None:
    storage.create_if_absent("t/instant", b"winner")
    assert storage.read("t/instant") == b"winner"
    with pytest.raises(ObjectAlreadyExistsError, match="t/instant"):
        storage.create_if_absent("t/instant", b"loser")
    assert storage.read("t/instant") == b"winner"


def test_create_if_absent_over_written_file(storage: Storage) -> None:
    storage.write("w", b"plain write")
    with pytest.raises(ObjectAlreadyExistsError):
        storage.create_if_absent("w", b"other")
    assert storage.read("w") == b"plain write"


def test_create_if_absent_concurrent_one_winner(storage: Storage) -> None:
    candidates = [payload(5_000, seed=i) for i in range(8)]
    winners: list[int] = []
    losers: list[int] = []
    seen_by_losers: list[bytes] = []

    def attempt(i: int) -> None:
        try:
            storage.create_if_absent("race/instant", candidates[i])
        except ObjectAlreadyExistsError:
            losers.append(i)
            seen_by_losers.append(storage.read("race/instant"))
        else:
            winners.append(i)

    run_threads(8, attempt)
    assert len(winners) == 1, f"winners: {winners}"
    assert len(losers) == 7
    won = candidates[winners[0]]
    assert storage.read("race/instant") == won
    # a loser that looks right away sees the winner's whole file, never an empty or partial one
    assert seen_by_losers == [won] * 7


def test_concurrent_writes_same_path(storage: Storage) -> None:
    candidates = [payload(5_000, seed=i) for i in range(8)]
    run_threads(8, lambda i: storage.write("w/same", candidates[i]))
    assert storage.read("w/same") in candidates
    assert [f.path for f in storage.list("w/")] == ["w/same"]


LISTED = {
    "a/b/c.log": 3,
    "a/b/d.log": 4,
    "a/bc.txt": 5,
    "a/x": 1,
    "ab": 2,
    "b/y/z/deep": 6,
}


@pytest.fixture
def listed(storage: Storage) -> Storage:
    for path, size in LISTED.items():
        storage.write(path, b"x" * size)
    return storage


def infos(*paths: str) -> list[FileInfo]:
    return [FileInfo(p, LISTED[p]) for p in paths]


def test_list_everything(listed: Storage) -> None:
    assert list(listed.list()) == infos(*sorted(LISTED))
    assert list(listed.list("")) == infos(*sorted(LISTED))


@pytest.mark.parametrize(
    ("prefix", "expected"),
    [
        ("a/", ["a/b/c.log", "a/b/d.log", "a/bc.txt", "a/x"]),
        ("a/b/", ["a/b/c.log", "a/b/d.log"]),
        ("a/b", ["a/b/c.log", "a/b/d.log", "a/bc.txt"]),  # part of a directory and a file name
        ("a/b/c", ["a/b/c.log"]),  # part of a file name
        ("a", ["a/b/c.log", "a/b/d.log", "a/bc.txt", "a/x", "ab"]),
        ("b/y/z/deep", ["b/y/z/deep"]),  # a whole file name
        ("b/", ["b/y/z/deep"]),  # recursive
        ("zzz", []),
        ("a/zz/", []),
        ("a/x/", []),  # a file, not a directory
    ],
)
def test_list_prefix(listed: Storage, prefix: str, expected: list[str]) -> None:
    assert list(listed.list(prefix)) == infos(*expected)


@pytest.mark.parametrize(
    ("folder", "folders", "files"),
    [
        ("", ("a", "b"), ("ab",)),
        ("a", ("b",), ("bc.txt", "x")),
        ("a/", ("b",), ("bc.txt", "x")),  # a trailing slash names the same folder
        ("a/b", (), ("c.log", "d.log")),
        ("b", ("y",), ()),
        ("zzz", (), ()),  # an absent folder is empty
        ("a/x", (), ()),  # a file, not a folder
    ],
)
def test_list_dir_gives_direct_children(
    listed: Storage, folder: str, folders: tuple[str, ...], files: tuple[str, ...]
) -> None:
    listing = listed.list_dir(folder)
    assert (listing.folders, listing.files) == (folders, files)


@pytest.mark.parametrize(
    ("prefix", "expected"),
    [
        ("", ["ab"]),
        ("a/", ["a/bc.txt", "a/x"]),
        ("a/b", ["a/bc.txt"]),  # files of a/ starting with b; the folder a/b is not entered
        ("a/b/", ["a/b/c.log", "a/b/d.log"]),
        ("b/", []),
        ("b/y/z/", ["b/y/z/deep"]),
    ],
)
def test_list_without_recursion(listed: Storage, prefix: str, expected: list[str]) -> None:
    assert list(listed.list(prefix, recursive=False)) == infos(*expected)


def test_list_dir_agrees_with_the_generic_walk(listed: Storage) -> None:
    # the interface's fallback (built on list) and each storage's own answer must not drift apart
    for folder in ("", "a", "a/b", "b", "b/y", "nope"):
        assert listed.list_dir(folder) == Storage.list_dir(listed, folder)
        assert listed.list_folder(folder) == Storage.list_folder(listed, folder)


@pytest.mark.parametrize("folder", ["", "a", "a/", "a/b", "b", "zzz", "a/x"])
def test_list_folder_gives_the_folders_of_list_dir_and_the_files_with_sizes(listed: Storage, folder: str) -> None:
    listing, by_name = listed.list_folder(folder), listed.list_dir(folder)
    prefix = f"{folder.rstrip('/')}/" if folder else ""
    assert listing.folders == by_name.folders
    assert listing.files == tuple(infos(*(prefix + name for name in by_name.files)))


def test_list_empty_storage(storage: Storage) -> None:
    assert list(storage.list()) == []
    assert list(storage.list("anything/")) == []


def test_list_is_sorted_by_path(storage: Storage) -> None:
    names = [f"p/{random.Random(7).randrange(10**6):06d}-{i}" for i in range(30)]
    for name in names:
        storage.write(name, b"")
    assert [f.path for f in storage.list("p/")] == sorted(names)


def test_delete(storage: Storage) -> None:
    storage.write("d/f", b"data")
    storage.write("d/keep", b"keep")
    storage.delete("d/f")
    assert not storage.exists("d/f")
    with pytest.raises(ObjectNotFoundError):
        storage.read("d/f")
    assert [f.path for f in storage.list("d/")] == ["d/keep"]
    storage.delete("d/f")  # deleting again is fine
    storage.delete("never/existed")


def test_exists(storage: Storage) -> None:
    assert not storage.exists("e/f")
    storage.write("e/f", b"")
    assert storage.exists("e/f")
    assert not storage.exists("e")  # a "directory" is not a file
    assert not storage.exists("e/f/g")


def test_size(storage: Storage) -> None:
    storage.write("s", payload(12_345))
    assert storage.size("s") == 12_345


def test_open_input(storage: Storage) -> None:
    data = payload(1_000_000)
    storage.write("big", data)
    with storage.open_input("big") as source:
        assert source.size == len(data)
        assert source.path == storage.full_uri("big")
        assert source.read_at(0, 10) == data[:10]
        assert source.read_at(500_000, 100_000) == data[500_000:600_000]
        assert source.read_at(999_990, 100) == data[999_990:]  # fewer at the end
        assert source.read_at(1_000_000, 10) == b""
        assert source.read_at(2_000_000, 10) == b""
        assert source.read_at(123, 0) == b""
        assert source.read_at(0, len(data)) == data
        with pytest.raises(ValueError, match="negative"):
            source.read_at(-1, 5)


def test_open_input_many_small_reads(storage: Storage) -> None:
    data = payload(700_000, seed=3)
    storage.write("headers", data)
    rng = random.Random(11)
    with storage.open_input("headers") as source:
        # forward walk, as a block header pass does: small reads at increasing offsets
        for offset in range(0, len(data) + 100, 997):
            assert source.read_at(offset, 17) == data[offset : offset + 17]
        # and some jumping around, including back to before the last window
        for _ in range(200):
            offset = rng.randrange(len(data) + 50)
            length = rng.choice([1, 4, 8, 64, 3_000, 300_000])
            assert source.read_at(offset, length) == data[offset : offset + length]


@pytest.mark.parametrize(
    "operation",
    [
        pytest.param(lambda s: s.read("missing/f"), id="read"),
        pytest.param(lambda s: s.read_range("missing/f", 0, 10), id="read_range"),
        pytest.param(lambda s: s.size("missing/f"), id="size"),
        pytest.param(lambda s: s.open_input("missing/f"), id="open_input"),
    ],
)
def test_missing_file(storage: Storage, operation: Callable[[Storage], Any]) -> None:
    with pytest.raises(ObjectNotFoundError) as excinfo:
        operation(storage)
    assert storage.full_uri("missing/f") in str(excinfo.value)


def test_append(storage: Storage) -> None:
    if storage.supports_append:
        storage.append("log/a", b"one,")
        storage.append("log/a", b"two")
        assert storage.read("log/a") == b"one,two"
    else:
        with pytest.raises(AppendNotSupportedError, match="log/a"):
            storage.append("log/a", b"one")
        assert not storage.exists("log/a")


def test_append_support_by_kind(storage: Storage) -> None:
    assert storage.supports_append == isinstance(storage, LocalStorage)


def test_full_uri(storage: Storage) -> None:
    assert storage.full_uri("a/b") == f"{storage.uri}/a/b"
    assert not storage.uri.endswith("/")


def test_hadoop_path_is_the_location_hudi_writes_in_its_plans(tmp_path: Path) -> None:
    """As Hadoop's Path prints a qualified location: ``file:/x`` (no ``//``), the S3 scheme the
    table was opened with (Hudi's file system takes no other)."""
    local = open_storage(f"file://{tmp_path}/my table/")
    assert local.hadoop_path("p=1/f.parquet") == f"file:{tmp_path.as_posix()}/my table/p=1/f.parquet"
    options = S3Options(endpoint_url="http://127.0.0.1:9", region="us-east-1", access_key_id="k", secret_access_key="s")
    assert open_storage("s3a://bucket/warehouse/t/", options).hadoop_path("p/f") == "s3a://bucket/warehouse/t/p/f"
    assert open_storage("s3://bucket/t", options).hadoop_path("f") == "s3://bucket/t/f"
    assert open_storage("s3://bucket", options).hadoop_path("p/f") == "s3://bucket/p/f"


# --- S3 only ---------------------------------------------------------------------------------------


@pytest.mark.s3
def test_open_storage_builds_s3(s3_location: tuple[str, S3Options]) -> None:
    from tidemark.storage.s3 import S3Storage

    location, options = s3_location
    bucket = location.removeprefix("s3://").split("/")[0]
    storage = open_storage(location, options)
    assert isinstance(storage, S3Storage)
    assert storage.uri == location
    assert storage.bucket == bucket
    assert storage.prefix == "some-prefix"
    assert storage.endpoint == options.endpoint_url

    for variant in (f"{location}/", f"s3a://{bucket}/some-prefix"):
        other = open_storage(variant, options)
        assert isinstance(other, S3Storage)
        assert other.uri == location

    # written through one, read through another storage with the same root
    storage.write("x", b"shared")
    assert open_storage(f"{location}/", options).read("x") == b"shared"


@pytest.mark.s3
def test_s3_bucket_root_and_prefix_isolation(s3_location: tuple[str, S3Options]) -> None:
    location, options = s3_location
    bucket = location.removeprefix("s3://").split("/")[0]
    root = open_storage(f"s3://{bucket}", options)
    assert root.uri == f"s3://{bucket}"
    p = open_storage(f"s3://{bucket}/p", options)
    p2 = open_storage(f"s3://{bucket}/p2", options)
    nested = open_storage(f"s3://{bucket}/p/q", options)
    p.write("f", b"1")
    p2.write("f", b"22")
    nested.write("g", b"333")
    assert list(p.list()) == [FileInfo("f", 1), FileInfo("q/g", 3)]
    assert list(p2.list()) == [FileInfo("f", 2)]
    assert list(nested.list()) == [FileInfo("g", 3)]
    assert list(root.list()) == [FileInfo("p/f", 1), FileInfo("p/q/g", 3), FileInfo("p2/f", 2)]
    assert root.read("p/q/g") == b"333"


@pytest.mark.s3
def test_a_hash_or_question_mark_is_part_of_the_location_not_the_end_of_it(
    s3_location: tuple[str, S3Options], tmp_path: Path
) -> None:
    # S3 keys and file names may hold them (Hadoop's Path keeps them): cut there, the location
    # named another table, and a write went into it
    location, options = s3_location
    open_storage(location, options).write("f", b"plain")
    for odd in (f"{location}#v2", f"{location}?copy=1", f"{location}/x#1?y"):
        storage = open_storage(odd, options)
        assert storage.uri == odd
        assert not storage.exists("f")
        storage.write("f", b"odd")
        assert canonical_location(odd) == odd
    assert open_storage(location, options).read("f") == b"plain"
    for local in (tmp_path / "t#1", tmp_path / "t?x"):
        for spelling in (str(local), f"file://{local}"):
            storage = open_storage(spelling)
            assert isinstance(storage, LocalStorage)
            assert storage.root == local
            assert canonical_location(spelling) == str(local)


def test_split_location_names_the_file_and_refuses_a_location_of_none() -> None:
    assert split_location("/data/t/.f.log.1_0-1-0") == ("/data/t", ".f.log.1_0-1-0")
    assert split_location("f.log") == (".", "f.log")
    assert split_location("/f.log") == ("/", "f.log")
    assert split_location("s3://b/p/f.log") == ("s3://b/p", "f.log")
    # split, these became the current directory, which errors then named instead of them
    for root in ("/", "//", "file:///", "s3://b/"):
        with pytest.raises(InvalidLocationError, match=f"^not a file location: {root}$"):
            split_location(root)
    with pytest.raises(InvalidLocationError, match=r"^no file location given$"):
        split_location("")


@pytest.mark.s3
def test_s3_dot_segments_and_double_slashes_name_the_table_hadoop_does(s3_location: tuple[str, S3Options]) -> None:
    # Spark and Hudi open s3a:// locations through Hadoop's Path, which drops empty segments and
    # resolves "." and "..": taken literally, these spellings were "not a Hudi table" to tidemark,
    # and a write there made a second table
    location, options = s3_location
    bucket = location.removeprefix("s3://").split("/")[0]
    open_storage(f"{location}/tbl", options).write("f", b"one")
    for spelling in (
        f"s3://{bucket}//some-prefix//tbl",
        f"s3://{bucket}/some-prefix/./tbl/.",
        f"s3a://{bucket}/some-prefix/x/../tbl/",
        f"s3://{bucket}/a/b/../../some-prefix/tbl",
    ):
        storage = open_storage(spelling, options)
        assert storage.uri == f"{location}/tbl"
        assert storage.read("f") == b"one"
        assert canonical_location(spelling) == f"{location}/tbl"
    assert open_storage(f"s3://{bucket}/some-prefix/..", options).uri == f"s3://{bucket}"
    for climbing in (f"s3://{bucket}/..", f"s3://{bucket}/some-prefix/../../tbl"):
        with pytest.raises(InvalidLocationError, match="climbs above its bucket"):
            open_storage(climbing, options)
        assert canonical_location(climbing) == climbing  # open_storage's error, not another table's key


@pytest.mark.s3
def test_s3_endpoint_from_environment(s3_location: tuple[str, S3Options], monkeypatch: pytest.MonkeyPatch) -> None:
    location, options = s3_location
    assert options.endpoint_url is not None
    monkeypatch.setenv("TIDEMARK_S3_ENDPOINT", options.endpoint_url)
    storage = open_storage(location, S3Options(region="us-east-1"))
    storage.write("env", b"ok")
    assert storage.read("env") == b"ok"


@pytest.mark.s3
@pytest.mark.slow  # ~6 s: moto answers a PUT in a few milliseconds
def test_s3_list_paginates(s3_storage: Storage) -> None:
    names = [f"many/{i:05d}" for i in range(1_050)]  # more than one 1000-key page
    for name in names:
        s3_storage.write(name, b"")
    assert [f.path for f in s3_storage.list("many/")] == names


@pytest.mark.s3
def test_s3_list_skips_folder_markers(s3_location: tuple[str, S3Options]) -> None:
    location, options = s3_location
    storage = open_storage(location, options)
    open_storage(location.rsplit("/", 1)[0], options).write("some-prefix/dir/", b"")
    storage.write("dir/f", b"f")
    assert list(storage.list()) == [FileInfo("dir/f", 1)]


@pytest.mark.s3
def test_s3_read_ahead_saves_requests(s3_storage: Storage) -> None:
    from tidemark.storage.s3 import READ_AHEAD, S3Storage

    assert isinstance(s3_storage, S3Storage)
    data = payload(4 * READ_AHEAD, seed=5)
    s3_storage.write("blocks", data)
    calls: list[str] = []

    def count(**kwargs: Any) -> None:
        calls.append(kwargs.get("event_name", ""))

    events = s3_storage._client.meta.events
    events.register("before-call.s3.GetObject", count)
    events.register("before-call.s3.HeadObject", count)
    try:
        with s3_storage.open_input("blocks") as source:
            assert len(calls) == 1  # the HEAD for the size
            reads = 0
            for offset in range(0, len(data), 1_000):
                assert source.read_at(offset, 24) == data[offset : offset + 24]
                reads += 1
    finally:
        events.unregister("before-call.s3.GetObject", count)
        events.unregister("before-call.s3.HeadObject", count)
    gets = len(calls) - 1
    assert reads > 1_000
    assert gets <= 5, f"{gets} GETs for {reads} small reads"


@pytest.mark.s3
def test_s3_source_detects_replaced_object(s3_storage: Storage) -> None:
    from tidemark.storage.s3 import READ_AHEAD

    data = payload(3 * READ_AHEAD, seed=1)
    s3_storage.write("f", data)
    with s3_storage.open_input("f") as source:
        assert source.read_at(0, 10) == data[:10]
        s3_storage.write("f", payload(3 * READ_AHEAD, seed=2))
        assert source.read_at(10, 10) == data[10:20]  # still the window fetched before
        with pytest.raises(StorageError, match="replaced while being read"):
            source.read_at(2 * READ_AHEAD, 10)


@pytest.mark.s3
def test_s3_create_if_absent_error_cause_is_chained(s3_storage: Storage) -> None:
    s3_storage.create_if_absent("i", b"1")
    with pytest.raises(ObjectAlreadyExistsError) as excinfo:
        s3_storage.create_if_absent("i", b"2")
    assert excinfo.value.__cause__ is not None  # the S3 PreconditionFailed, for debugging
    assert s3_storage.full_uri("i") in str(excinfo.value)


@pytest.mark.s3
@pytest.mark.parametrize(("existing", "outcome"), [("ours", "won"), ("theirs", "lost")])
def test_s3_create_if_absent_retry_after_lost_answer(
    s3_storage: Storage, monkeypatch: pytest.MonkeyPatch, existing: str, outcome: str
) -> None:
    """A PUT lands but its answer is lost; botocore retries and gets 412. When the object holds
    exactly our bytes that was our own first try: the create succeeded."""
    from botocore.exceptions import ClientError

    from tidemark.storage.s3 import S3Storage

    assert isinstance(s3_storage, S3Storage)
    client = s3_storage._client
    real_put = client.put_object
    ours, theirs = b"our instant", b"their instant"

    def put_then_lose_answer(**kwargs: Any) -> Any:
        real_put(**{**kwargs, "Body": ours if existing == "ours" else theirs})
        raise ClientError(
            {
                "Error": {"Code": "PreconditionFailed", "Message": "At least one of the pre-conditions"},
                "ResponseMetadata": {
                    "HTTPStatusCode": 412,
                    "RetryAttempts": 1,
                    "RequestId": "r",
                    "HostId": "h",
                    "HTTPHeaders": {},
                },
            },
            "PutObject",
        )

    monkeypatch.setattr(client, "put_object", put_then_lose_answer)
    if outcome == "won":
        s3_storage.create_if_absent("i", ours)
    else:
        with pytest.raises(ObjectAlreadyExistsError):
            s3_storage.create_if_absent("i", ours)
    monkeypatch.undo()
    assert s3_storage.read("i") == (ours if existing == "ours" else theirs)
    with pytest.raises(ObjectAlreadyExistsError):
        s3_storage.create_if_absent("i", ours)  # without a retry, 412 always means "lost"


S3_OPERATIONS = [
    pytest.param(lambda s: s.read("f"), id="read"),
    pytest.param(lambda s: s.read_range("f", 0, 5), id="read_range"),
    pytest.param(lambda s: s.write("f", b"x"), id="write"),
    pytest.param(lambda s: s.create_if_absent("f", b"x"), id="create_if_absent"),
    pytest.param(lambda s: list(s.list()), id="list"),
    pytest.param(lambda s: s.delete("f"), id="delete"),
    pytest.param(lambda s: s.exists("f"), id="exists"),
    pytest.param(lambda s: s.size("f"), id="size"),
    pytest.param(lambda s: s.open_input("f"), id="open_input"),
]


def assert_storage_error_only(excinfo: pytest.ExceptionInfo[StorageError]) -> None:
    """The error is ours; botocore's is only its cause."""
    assert type(excinfo.value).__module__ == "tidemark.errors"
    cause = excinfo.value.__cause__
    assert cause is not None
    assert type(cause).__module__.startswith("botocore")


@pytest.mark.s3
@pytest.mark.parametrize("operation", S3_OPERATIONS)
def test_s3_endpoint_not_listening(fake_aws_env: None, operation: Callable[[Storage], Any]) -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    storage = open_storage("s3://some-bucket/p", s3_options(endpoint))
    started = time.monotonic()
    with pytest.raises(StorageError) as excinfo:
        operation(storage)
    elapsed = time.monotonic() - started
    assert type(excinfo.value) is StorageUnreachableError
    assert endpoint in str(excinfo.value)
    assert "unreachable" in str(excinfo.value)
    assert elapsed < 15, f"took {elapsed:.1f}s to give up"
    assert_storage_error_only(excinfo)


@pytest.mark.s3
@pytest.mark.parametrize("operation", [p for p in S3_OPERATIONS if p.id != "exists"])
def test_s3_missing_bucket(moto_server: str, operation: Callable[[Storage], Any]) -> None:
    bucket = "tidemark-no-such-bucket"
    storage = open_storage(f"s3://{bucket}/p", s3_options(moto_server))
    with pytest.raises(StorageError, match=bucket) as excinfo:
        operation(storage)
    assert_storage_error_only(excinfo)


@pytest.mark.s3
def test_a_bucket_the_endpoint_url_hides_is_named_with_the_endpoint(moto_server: str) -> None:
    # a path in the endpoint URL: the server takes its first folder for the bucket
    create_bucket(moto_server, "parts")
    storage = open_storage("s3://parts/t", s3_options(f"{moto_server}/some/path"))
    with pytest.raises(StorageError, match=rf"bucket 'some' does not exist at the S3 endpoint {moto_server}/some/path"):
        storage.read("f")


@pytest.mark.s3
def test_s3_missing_bucket_exists_is_false(moto_server: str) -> None:
    # HEAD answers a bare 404 for a missing bucket too, so it cannot be told from a missing object
    storage = open_storage("s3://tidemark-no-such-bucket/p", s3_options(moto_server))
    assert not storage.exists("f")


@pytest.mark.s3
@pytest.mark.parametrize(
    "operation",
    [
        *(p for p in S3_OPERATIONS if p.id not in ("exists", "size", "open_input")),  # those are HEADs
        pytest.param(lambda s: s.read_versioned("f"), id="read_versioned"),
        pytest.param(lambda s: s.write_if_match("f", b"x", None), id="write_if_absent"),
        pytest.param(lambda s: s.write_if_match("f", b"x", '"etag"'), id="write_if_match"),
    ],
)
def test_an_endpoint_that_is_not_s3_is_named_not_taken_for_a_missing_file(
    not_s3_endpoint: str, operation: Callable[[Storage], Any]
) -> None:
    """A web app or proxy on a mistyped endpoint port answers 404 with no S3 error to everything:
    every command said the table does not exist, and the services dead-lettered its events. S3
    says NoSuchKey or NoSuchBucket in the body; a bare 404 is a missing object only for a HEAD."""
    storage = open_storage("s3://lake/orders", s3_options(not_s3_endpoint))
    with pytest.raises(StorageUnreachableError) as excinfo:
        operation(storage)
    message = str(excinfo.value)
    assert message.startswith("cannot ")
    assert "s3://lake/orders" in message  # the file, or the folder listed
    assert message.endswith(f": S3 endpoint {not_s3_endpoint} answered 404 without an S3 error: is it an S3 endpoint?")
    assert_storage_error_only(excinfo)
    # a HEAD has no body to say more: there a bare 404 is all S3 says of a missing object too
    assert not storage.exists("f")
    with pytest.raises(ObjectNotFoundError):
        storage.size("f")


@pytest.mark.s3
def test_s3_server_stopped_mid_use(fake_aws_env: None) -> None:
    from tidemark.storage.s3 import READ_AHEAD

    server, endpoint = start_moto_server()
    try:
        bucket = create_bucket(endpoint)
        storage = open_storage(f"s3://{bucket}/t", s3_options(endpoint))
        data = payload(3 * READ_AHEAD)
        storage.write("f", data)
        assert storage.read("f") == data
        source = storage.open_input("f")
        assert source.read_at(0, 10) == data[:10]
    finally:
        server.stop()

    started = time.monotonic()
    for operation in (
        lambda: storage.read("f"),
        lambda: storage.write("g", b"x"),
        lambda: storage.exists("f"),
        lambda: source.read_at(2 * READ_AHEAD, 10),  # outside the window already fetched
    ):
        with pytest.raises(StorageUnreachableError, match="unreachable") as excinfo:
            operation()
        assert endpoint in str(excinfo.value)
        assert_storage_error_only(excinfo)
    assert time.monotonic() - started < 30
    assert source.read_at(5, 5) == data[5:10]  # what was fetched is still served


@pytest.mark.s3
def test_s3_half_credentials_rejected() -> None:
    with pytest.raises(StorageError, match="secret access key"):
        open_storage("s3://bucket/p", S3Options(endpoint_url="http://127.0.0.1:1", access_key_id="k"))


@pytest.mark.s3
def test_s3_bad_endpoint_url() -> None:
    with pytest.raises(StorageError, match="not a url"):
        open_storage("s3://bucket/p", S3Options(endpoint_url="not a url"))


# --- local only ------------------------------------------------------------------------------------


def test_open_storage_file_uri(tmp_path: Path) -> None:
    storage = open_storage(f"file://{tmp_path}")
    assert isinstance(storage, LocalStorage)
    assert storage.root == tmp_path
    assert storage.uri == str(tmp_path)
    storage.write("f", b"x")
    assert (tmp_path / "f").read_bytes() == b"x"

    x = open_storage("file:///x")
    assert isinstance(x, LocalStorage)
    assert x.root == Path("/x")
    assert isinstance(open_storage("file://localhost/x"), LocalStorage)


def test_open_storage_plain_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    storage = open_storage(str(tmp_path))
    assert isinstance(storage, LocalStorage)
    assert storage.root == tmp_path
    monkeypatch.chdir(tmp_path)
    relative = open_storage("rel/dir")
    assert isinstance(relative, LocalStorage)
    assert relative.root == tmp_path / "rel" / "dir"


@pytest.mark.parametrize(
    "location",
    ["", "http://example.com/x", "gs://bucket/p", "hdfs://nn/p", "ftp://h/p", "s3://", "file://host/x"],
)
def test_open_storage_invalid(location: str) -> None:
    with pytest.raises(InvalidLocationError):
        open_storage(location)


@pytest.mark.s3
@pytest.mark.parametrize("bucket", ["lake name", "Bad_Bucket!", "lake:9000", "user@lake", "b" * 256, ".", ".."])
def test_an_invalid_bucket_name_is_refused_in_one_line_before_any_request(bucket: str) -> None:
    """botocore's "Parameter validation failed" came out instead, with a 337-character regex on a
    second line; then a rule (3 to 63 lowercase letters...) that is not the one applied. '.' and
    '..' were sent as they are (GET /./lake/t/...), which a proxy may resolve to another bucket.
    Nothing listens at the endpoint: the name is refused before any request."""
    location = f"s3://{bucket}/t"
    with pytest.raises(InvalidLocationError) as excinfo:
        open_storage(location, S3Options(endpoint_url="http://127.0.0.1:1")).read(".hoodie/hoodie.properties")
    assert str(excinfo.value) == (
        f"{location}: invalid S3 bucket name {bucket!r} "
        "(a bucket name is at most 255 letters, digits, '.', '-' and '_', and not '.' or '..')"
    )


@pytest.mark.s3
def test_a_bucket_name_s3_once_allowed_is_asked_for_not_refused(moto_server: str) -> None:
    # capitals and underscores: older us-east-1 buckets have them; the server says if it knows the name
    storage = open_storage("s3://Old_Bucket/t", s3_options(moto_server))
    with pytest.raises(StorageError, match=f"bucket 'Old_Bucket' does not exist at the S3 endpoint {moto_server}"):
        storage.read("f")


def test_local_write_leaves_no_temporary_files(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path)
    storage.write("d/f", b"1")
    storage.write("d/f", b"2")
    storage.create_if_absent("d/g", b"3")
    assert sorted(os.listdir(tmp_path / "d")) == ["f", "g"]


@pytest.mark.parametrize(
    "operation",
    [
        pytest.param(lambda s: s.write("d/f", b"1"), id="write"),
        pytest.param(lambda s: s.create_if_absent("d/f", b"1"), id="create_if_absent"),
        pytest.param(lambda s: s.write_if_match("d/f", b"1", None), id="write_if_match"),
    ],
)
def test_local_writes_sync_the_folder_after_the_file_is_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, operation: Callable[[Storage], Any]
) -> None:
    """A file's data was synced but not the folder entry the link or rename made: a power cut soon
    after a commit returned could bring its instant back as inflight, to be rolled back."""
    storage = LocalStorage(tmp_path)
    (tmp_path / "d").mkdir()
    folder = os.stat(tmp_path / "d")
    synced: list[tuple[int, int, bool]] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        st = os.fstat(fd)
        synced.append((st.st_dev, st.st_ino, (tmp_path / "d" / "f").exists()))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    operation(storage)
    assert (folder.st_dev, folder.st_ino, True) in synced  # the folder, once the file is in it


def test_local_create_whose_link_answered_already_exists_after_landing_is_ours(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On NFS a LINK whose answer was lost is retransmitted, and the retransmission answers EEXIST
    for the link the first one made: a commit that landed was taken for another writer's."""
    storage = LocalStorage(tmp_path)
    storage.create_if_absent(".hoodie/theirs.commit", b"theirs")
    real_link = os.link

    def link_answer_lost(src: Any, dst: Any) -> None:
        real_link(src, dst)
        raise FileExistsError(17, "File exists", str(dst))

    monkeypatch.setattr(os, "link", link_answer_lost)
    storage.create_if_absent(".hoodie/ours.commit", b"ours")
    with pytest.raises(ObjectAlreadyExistsError):  # a file that was there stays another writer's
        storage.create_if_absent(".hoodie/theirs.commit", b"ours")
    monkeypatch.undo()
    assert storage.read(".hoodie/ours.commit") == b"ours"
    assert storage.read(".hoodie/theirs.commit") == b"theirs"
    assert sorted(os.listdir(tmp_path / ".hoodie")) == ["ours.commit", "theirs.commit"]  # no temporary file left


def test_local_open_input_directory(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path)
    storage.write("d/f", b"1")
    with pytest.raises(StorageError, match="is a folder, not a file"):
        storage.open_input("d")


def test_a_path_opens_and_a_location_where_a_storage_is_needed_is_named(tmp_path: Path) -> None:
    """open_storage(pathlib.Path) failed ("not iterable"), and a library call given a location
    instead of a Storage failed deep inside on a missing attribute."""
    from tests.support.table_builder import TableBuilder
    from tidemark.table import read_snapshot
    from tidemark.table.compaction import compact, schedule_compaction
    from tidemark.table.incremental import read_incremental
    from tidemark.table.write_client import rollback
    from tidemark.table_services.archive import ArchiveConfig, archive
    from tidemark.table_services.clean import CleanConfig, clean
    from tidemark.table_services.restore import restore
    from tidemark.table_services.savepoint import create_savepoint

    TableBuilder(LocalStorage(tmp_path)).insert(["a"], 1)
    assert read_snapshot(open_storage(tmp_path)).column("id").to_pylist() == ["a"]
    location = str(tmp_path)
    for call in (
        lambda: read_snapshot(location),  # type: ignore[arg-type]
        lambda: read_snapshot(tmp_path),  # type: ignore[arg-type]
        lambda: read_incremental(location, "000"),  # type: ignore[arg-type]
        lambda: compact(location),  # type: ignore[arg-type]
        lambda: schedule_compaction(location),  # type: ignore[arg-type]
        lambda: clean(location, CleanConfig()),  # type: ignore[arg-type]
        lambda: archive(location, ArchiveConfig()),  # type: ignore[arg-type]
        lambda: create_savepoint(location, "000"),  # type: ignore[arg-type]
        lambda: restore(location, "000"),  # type: ignore[arg-type]
        lambda: rollback(location, "000"),  # type: ignore[arg-type]
    ):
        with pytest.raises(TypeError, match=r"expected a tidemark\.storage\.Storage, got .*open_storage\(location\)"):
            call()


@pytest.mark.s3
def test_a_hung_s3_endpoint_is_tried_max_attempts_times(fake_aws_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """An endpoint that takes each request and never answers: README says 3 tries (30 s each).
    Before, MAX_ATTEMPTS was botocore's count of retries, so 4 tries (about 125 s a request)."""
    from tidemark.storage import s3

    monkeypatch.setattr(s3, "READ_TIMEOUT_S", 1)
    listener = socket.create_server(("127.0.0.1", 0))
    tries: list[bytes] = []
    held: list[socket.socket] = []

    listener.settimeout(0.1)
    done = threading.Event()

    def take_and_hold() -> None:
        while not done.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            held.append(conn)
            tries.append(conn.recv(65536).split(b" ", 1)[0])  # the request line's method

    thread = threading.Thread(target=take_and_hold, daemon=True)
    thread.start()
    endpoint = f"http://127.0.0.1:{listener.getsockname()[1]}"
    try:
        storage = open_storage("s3://some-bucket/p", s3_options(endpoint))
        with pytest.raises(
            StorageUnreachableError, match=rf"cannot write s3://some-bucket/p/f: S3 endpoint {endpoint}"
        ):
            storage.write("f", b"x")
    finally:
        done.set()
        thread.join(timeout=5)
        listener.close()
        for conn in held:
            conn.close()
    assert s3.MAX_ATTEMPTS == 3
    assert tries == [b"PUT"] * 3


def _remove_folders_together(root: str, processes: int, rounds: int) -> int:
    """In a child process: ``rounds`` times, remove the empty folders under ``tree`` (which the
    parent built) at once with the other processes; the errors raised."""
    storage = LocalStorage(root)
    start_line(root, processes)
    errors = 0
    for n in range(rounds):
        try:
            storage.remove_empty_folders(f"tree{n}")
        except OSError:
            errors += 1
    return errors


def test_local_empty_folders_removed_by_two_processes_at_once_raise_nothing(tmp_path: Path) -> None:
    """Two commands disabling the metadata table at once (a clean and an archival, configured
    alike): the one whose walk met a folder the other had just removed failed with a
    FileNotFoundError traceback and did none of its own work."""
    processes, rounds = 3, 30
    for n in range(rounds):
        for a in range(6):
            for b in range(6):
                (tmp_path / f"tree{n}" / f"a{a}" / f"b{b}" / "c").mkdir(parents=True)
    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        errors = pool.starmap(_remove_folders_together, [(str(tmp_path), processes, rounds)] * processes, chunksize=1)
    assert errors == [0] * processes
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("tree")]


def test_a_caller_bounds_how_long_a_request_waits_for_an_endpoint(fake_aws_env: None) -> None:
    """The operator must not wait 30 s per try on an endpoint that never answers: its reads give a
    shorter timeout, to connect and for the answer alike."""
    listener = socket.create_server(("127.0.0.1", 0), backlog=16)  # takes connections, never answers
    endpoint = f"http://127.0.0.1:{listener.getsockname()[1]}"
    try:
        storage = open_storage("s3://some-bucket/p", replace(s3_options(endpoint), timeout_s=1))
        started = time.monotonic()
        with pytest.raises(StorageUnreachableError, match=rf"S3 endpoint {endpoint}"):
            storage.read("f")
        assert time.monotonic() - started < 10  # 3 tries of 1 s and the backoff between them
    finally:
        listener.close()
