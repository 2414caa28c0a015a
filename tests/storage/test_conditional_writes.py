"""Conditional writes (``read_versioned``, ``write_if_match``, ``modified_ms``) on local files and on
S3 (moto over HTTP): what the table lock stands on.

moto 5.2.5's threaded server checks ``If-Match`` and then stores, in two steps, so two racing PUTs
can both pass the check (seen in about one round of five with 8 threads). Real S3 decides each
conditional PUT atomically; the race tests on S3 therefore use a moto server that serves one
request at a time, which gives that atomicity, and check what the client side adds: the one that
won is told so and every other one gets a :class:`VersionMismatchError`.
"""

from __future__ import annotations

import multiprocessing
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.faults import FaultyStorage, InjectedFaultError
from tests.support.processes import free_port, start_line
from tests.support.s3 import (
    DROP,
    Answer,
    FaultProxy,
    Forward,
    create_bucket,
    is_conditional_put,
    s3_error,
    s3_options,
)
from tidemark.errors import (
    ObjectAlreadyExistsError,
    ObjectNotFoundError,
    OutcomeUnknownError,
    StorageError,
    VersionMismatchError,
)
from tidemark.storage import LocalStorage, Storage, open_storage
from tidemark.storage.s3 import CONFLICT_ATTEMPTS

RACERS = 8


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Storage:
    if request.param == "local":
        return LocalStorage(tmp_path / "root")
    s3: Storage = request.getfixturevalue("s3_storage")
    return s3


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def atomic_storage(request: pytest.FixtureRequest, tmp_path: Path) -> Storage:
    """A storage whose conditional writes are atomic, for the races: local, or S3 on the serial
    moto server."""
    if request.param == "local":
        return LocalStorage(tmp_path / "root")
    endpoint: str = request.getfixturevalue("serial_moto")
    return open_storage(f"s3://{create_bucket(endpoint)}/table", s3_options(endpoint))


def race(n: int, attempt: Callable[[int], str]) -> tuple[dict[int, str], dict[int, BaseException]]:
    """Run ``attempt(i)`` on ``n`` threads released together: the versions returned and the
    errors raised, by thread."""
    barrier = threading.Barrier(n)
    won: dict[int, str] = {}
    lost: dict[int, BaseException] = {}

    def run(i: int) -> None:
        barrier.wait()
        try:
            won[i] = attempt(i)
        except BaseException as e:
            lost[i] = e

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a racer hung"
    return won, lost


# --- the contract, on both storages ---------------------------------------------------------------


def test_create_then_swap(storage: Storage) -> None:
    first = storage.write_if_match("locks/lease.json", b"first", None)
    assert storage.read_versioned("locks/lease.json") == (b"first", first)
    second = storage.write_if_match("locks/lease.json", b"second", first)
    assert second != first
    assert storage.read_versioned("locks/lease.json") == (b"second", second)
    assert storage.read("locks/lease.json") == b"second"


def test_create_refuses_an_existing_file(storage: Storage) -> None:
    version = storage.write_if_match("f", b"mine", None)
    with pytest.raises(ObjectAlreadyExistsError, match="already exists") as excinfo:
        storage.write_if_match("f", b"yours", None)
    assert storage.full_uri("f") in str(excinfo.value)
    assert storage.read_versioned("f") == (b"mine", version)


def test_a_stale_version_is_refused_and_nothing_changes(storage: Storage) -> None:
    old = storage.write_if_match("f", b"one", None)
    current = storage.write_if_match("f", b"two", old)
    with pytest.raises(VersionMismatchError) as excinfo:
        storage.write_if_match("f", b"three", old)
    assert storage.full_uri("f") in str(excinfo.value)
    assert storage.read_versioned("f") == (b"two", current)


def test_an_absent_file_is_refused_and_not_created(storage: Storage) -> None:
    version = storage.write_if_match("f", b"one", None)
    storage.delete("f")
    with pytest.raises(VersionMismatchError) as excinfo:
        storage.write_if_match("f", b"two", version)
    assert storage.full_uri("f") in str(excinfo.value)
    assert not storage.exists("f")
    with pytest.raises(VersionMismatchError):
        storage.write_if_match("never/was", b"x", version)
    assert list(storage.list()) == []


def test_read_versioned_of_an_absent_file(storage: Storage) -> None:
    with pytest.raises(ObjectNotFoundError, match="no such file") as excinfo:
        storage.read_versioned("missing.json")
    assert storage.full_uri("missing.json") in str(excinfo.value)


def test_a_file_written_plainly_can_be_swapped(storage: Storage) -> None:
    storage.write("f", b"plain")
    data, version = storage.read_versioned("f")
    assert data == b"plain"
    storage.write_if_match("f", b"swapped", version)
    assert storage.read("f") == b"swapped"


def test_modified_ms_is_when_the_file_was_written(storage: Storage) -> None:
    before = time.time()
    storage.write_if_match("f", b"x", None)
    after = time.time()
    modified = storage.modified_ms("f")
    # S3 keeps whole seconds, and moto's clock is this machine's
    assert int(before) * 1000 - 1000 <= modified <= after * 1000 + 1000
    with pytest.raises(ObjectNotFoundError) as excinfo:
        storage.modified_ms("missing")
    assert storage.full_uri("missing") in str(excinfo.value)


def test_of_racers_expecting_one_version_exactly_one_wins(atomic_storage: Storage) -> None:
    for round_no in range(10):
        path = f"race/{round_no}"
        start = atomic_storage.write_if_match(path, b"start", None)

        def swap(i: int, path: str = path, start: str = start) -> str:
            return atomic_storage.write_if_match(path, f"racer {i}".encode(), start)

        won, lost = race(RACERS, swap)
        assert len(won) == 1, f"round {round_no}: {len(won)} winners"
        assert all(isinstance(e, VersionMismatchError) for e in lost.values()), lost
        ((winner, version),) = won.items()
        assert atomic_storage.read_versioned(path) == (f"racer {winner}".encode(), version)


def test_of_racers_creating_one_file_exactly_one_wins(atomic_storage: Storage) -> None:
    for round_no in range(10):
        path = f"create/{round_no}"

        def create(i: int, path: str = path) -> str:
            return atomic_storage.write_if_match(path, f"racer {i}".encode(), None)

        won, lost = race(RACERS, create)
        assert len(won) == 1, f"round {round_no}: {len(won)} winners"
        assert all(isinstance(e, ObjectAlreadyExistsError) for e in lost.values()), lost
        ((winner, version),) = won.items()
        assert atomic_storage.read_versioned(path) == (f"racer {winner}".encode(), version)


def test_a_version_read_is_the_version_of_the_bytes_read(atomic_storage: Storage) -> None:
    """A reader racing a writer: every (bytes, version) it reads is a pair the writer wrote, never
    new bytes with an old version or half a file."""
    written = {atomic_storage.write_if_match("f", b"0" * 1000, None): b"0" * 1000}
    stop = threading.Event()
    seen: list[tuple[bytes, str]] = []

    def read_all_the_time() -> None:
        while not stop.is_set():
            seen.append(atomic_storage.read_versioned("f"))

    reader = threading.Thread(target=read_all_the_time)
    reader.start()
    try:
        version = next(iter(written))
        for n in range(1, 60):
            data = str(n).encode() * (1000 // len(str(n)))
            version = atomic_storage.write_if_match("f", data, version)
            written[version] = data
    finally:
        stop.set()
        reader.join(timeout=30)
    assert seen
    for data, version in seen:
        assert written.get(version) == data


# --- local files ----------------------------------------------------------------------------------


def test_local_identical_bytes_written_again_are_a_new_version(tmp_path: Path) -> None:
    """No ABA: a swap frees the replaced file's inode, which the next file may get again, and file
    systems keep coarse times; every version must still be new, so an old one is always refused."""
    storage = LocalStorage(tmp_path)
    versions = [storage.write_if_match("f", b"same", None)]
    for _ in range(200):
        versions.append(storage.write_if_match("f", b"same", versions[-1]))
    assert len(set(versions)) == len(versions)
    for old in versions[:-1:20]:
        with pytest.raises(VersionMismatchError):
            storage.write_if_match("f", b"same", old)
    assert storage.read_versioned("f") == (b"same", versions[-1])


def test_local_side_files_stay_out_of_listings(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path)
    version = storage.write_if_match(".hoodie/.locks/table_lock.json", b"1", None)
    storage.write_if_match(".hoodie/.locks/table_lock.json", b"2", version)
    assert [f.path for f in storage.list(".hoodie/")] == [".hoodie/.locks/table_lock.json"]
    assert storage.list_dir(".hoodie/.locks").files == ("table_lock.json",)
    # the flock's side file stays (removing it would let two writers lock two different files)
    assert sorted(p.name for p in (tmp_path / ".hoodie/.locks").iterdir()) == [
        ".table_lock.json.tidemark-tmp-cas",
        "table_lock.json",
    ]


def test_local_absent_folder_is_not_created_by_a_refused_swap(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path)
    with pytest.raises(VersionMismatchError, match="does not exist"):
        storage.write_if_match("no/such/folder/f", b"x", "1-2-3")
    assert not (tmp_path / "no").exists()


def _count_up(root: str, times: int, processes: int) -> int:
    """In a child process: add 1 to the counter file ``times`` times by compare-and-swap; the
    number of swaps that lost a race and were tried again. It starts once every one of the
    ``processes`` has (a machine under load started them one after the other: they never raced)."""
    storage = LocalStorage(root)
    start_line(root, processes)
    retries = 0
    for _ in range(times):
        while True:
            data, version = storage.read_versioned("counter")
            try:
                storage.write_if_match("counter", str(int(data) + 1).encode(), version)
                break
            except VersionMismatchError:
                retries += 1
    return retries


def test_local_swaps_are_atomic_across_processes(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path)
    storage.write_if_match("counter", b"0", None)
    processes, times = 4, 100
    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        retries = pool.starmap(_count_up, [(str(tmp_path), times, processes)] * processes, chunksize=1)
    assert int(storage.read("counter")) == processes * times
    assert sum(retries) > 0, "the processes never raced: the test proved nothing"


def test_faulty_storage_counts_a_swap_as_a_mutation(tmp_path: Path) -> None:
    faulty = FaultyStorage(LocalStorage(tmp_path))
    version = faulty.write_if_match("f", b"1", None)
    faulty.arm(1)
    with pytest.raises(InjectedFaultError, match="write_if_match"):
        faulty.write_if_match("f", b"2", version)
    faulty.disarm()
    assert faulty.read_versioned("f") == (b"1", version)
    assert faulty.modified_ms("f") > 0


# --- S3 -------------------------------------------------------------------------------------------


@pytest.mark.s3
def test_s3_version_is_the_etag_of_the_content(s3_storage: Storage) -> None:
    """The documented limit on S3: the ETag of a plain PUT is the MD5 of its bytes, so identical
    bytes written again keep the version, and a swap expecting it still passes. Callers that must
    tell writes apart (the table lock) put something unique in every write."""
    first = s3_storage.write_if_match("f", b"same", None)
    assert s3_storage.write_if_match("f", b"same", first) == first
    assert s3_storage.write_if_match("f", b"other", first) != first


@pytest.mark.s3
def test_s3_refusal_chains_the_s3_error(s3_storage: Storage) -> None:
    version = s3_storage.write_if_match("f", b"1", None)
    s3_storage.write_if_match("f", b"2", version)
    with pytest.raises(VersionMismatchError) as excinfo:
        s3_storage.write_if_match("f", b"3", version)
    assert type(excinfo.value.__cause__).__module__.startswith("botocore")
    assert "412" in str(excinfo.value) or "PreconditionFailed" in str(excinfo.value)


@pytest.mark.s3
@pytest.mark.parametrize(
    "operation",
    [
        pytest.param(lambda s: s.read_versioned("f"), id="read_versioned"),
        pytest.param(lambda s: s.write_if_match("f", b"x", None), id="create"),
        pytest.param(lambda s: s.write_if_match("f", b"x", '"abc"'), id="swap"),
        pytest.param(lambda s: s.modified_ms("f"), id="modified_ms"),
    ],
)
def test_s3_unreachable_endpoint_is_a_storage_error(fake_aws_env: None, operation: Callable[[Storage], Any]) -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    storage = open_storage("s3://some-bucket/table", s3_options(endpoint))
    with pytest.raises(StorageError) as excinfo:
        operation(storage)
    assert type(excinfo.value).__module__ == "tidemark.errors"
    assert "s3://some-bucket/table/f" in str(excinfo.value)
    assert endpoint in str(excinfo.value)


class _LosingProxy(FaultProxy):
    """A proxy in front of moto that lets the first conditional PUT land and then hangs up without
    an answer, as a network failure after S3 stored the object does. With ``interloper`` it also
    writes those bytes over the object before hanging up: another writer that got in between the
    lost answer and botocore's retry."""

    def __init__(self, upstream: str, interloper: bytes | None) -> None:
        self.conditional_puts = 0

        def hook(method: str, path: str, headers: dict[str, str], body: bytes, forward: Forward) -> str | None:
            if not is_conditional_put(method, headers):
                return None
            self.conditional_puts += 1
            if self.conditional_puts > 1:
                return None
            forward(method, path, body, headers)
            if interloper is not None:
                plain = {k: v for k, v in headers.items() if k not in ("If-Match", "If-None-Match")}
                plain["Content-Length"] = str(len(interloper))
                forward("PUT", path, interloper, plain)
            return DROP  # the answer is lost

        super().__init__(upstream, hook)


@pytest.mark.s3
@pytest.mark.parametrize("kind", ["create", "swap"])
@pytest.mark.parametrize("interloper", [None, b"theirs"], ids=["ours-landed", "theirs-landed-after"])
def test_s3_answer_lost_then_retried(moto_server: str, kind: str, interloper: bytes | None) -> None:
    """botocore retries a PUT whose answer was lost, and the retry meets the first try's object
    (412). When the object holds our bytes the write succeeded: its version is returned. When
    another writer's bytes are there, ours was overwritten: the write counts as refused."""
    bucket = create_bucket(moto_server)
    direct = open_storage(f"s3://{bucket}/t", s3_options(moto_server))
    expected = None if kind == "create" else direct.write_if_match("f", b"before", None)
    proxy = _LosingProxy(moto_server, interloper)
    try:
        storage = open_storage(f"s3://{bucket}/t", s3_options(proxy.endpoint))
        if interloper is None:
            version = storage.write_if_match("f", b"ours", expected)
            assert direct.read_versioned("f") == (b"ours", version)
        else:
            refused = ObjectAlreadyExistsError if kind == "create" else VersionMismatchError
            with pytest.raises(refused):
                storage.write_if_match("f", b"ours", expected)
            assert direct.read("f") == interloper
        assert proxy.conditional_puts == 2  # the lost try and botocore's retry
    finally:
        proxy.close()


@pytest.mark.s3
def test_s3_create_whose_answer_was_lost_and_that_cannot_be_read_back_is_an_unknown_outcome(moto_server: str) -> None:
    """The create lands, its answer is lost, the retry meets it (412), and the read asking whose
    object that is fails too: not "already exists" (another writer's), which it may well not be."""
    bucket = create_bucket(moto_server)
    puts: list[str] = []

    def hook(method: str, path: str, headers: dict[str, str], body: bytes, forward: Forward) -> str | None:
        if is_conditional_put(method, headers):
            puts.append(path)
            if len(puts) == 1:
                forward(method, path, body, headers)
                return DROP
        return DROP if method == "GET" else None

    with FaultProxy(moto_server, hook) as proxy:
        storage = open_storage(f"s3://{bucket}/t", s3_options(proxy.endpoint))
        with pytest.raises(OutcomeUnknownError, match=r"cannot tell whether creating .*/t/f landed") as excinfo:
            storage.create_if_absent("f", b"ours")
    assert not isinstance(excinfo.value, ObjectAlreadyExistsError)
    assert len(puts) == 2
    assert open_storage(f"s3://{bucket}/t", s3_options(moto_server)).read("f") == b"ours"


@pytest.mark.s3
@pytest.mark.parametrize("kind", ["create", "swap"])
@pytest.mark.parametrize("conflicts", [1, CONFLICT_ATTEMPTS])
def test_s3_conditional_request_conflict_is_tried_again(moto_server: str, kind: str, conflicts: int) -> None:
    """S3 answers 409 ConditionalRequestConflict to a conditional PUT that raced another operation
    on the key, having decided nothing, and AWS says to try again. It was taken for "already
    exists" (another writer got there first) even with the key absent."""
    bucket = create_bucket(moto_server)
    direct = open_storage(f"s3://{bucket}/t", s3_options(moto_server))
    expected = None if kind == "create" else direct.write_if_match("f", b"before", None)
    puts: list[str] = []

    def hook(method: str, path: str, headers: dict[str, str], body: bytes, forward: Forward) -> Answer | None:
        if not is_conditional_put(method, headers):
            return None
        puts.append(path)
        if len(puts) > conflicts:
            return None
        return s3_error(409, "ConditionalRequestConflict", "A conflicting conditional operation is in progress.")

    with FaultProxy(moto_server, hook) as proxy:
        storage = open_storage(f"s3://{bucket}/t", s3_options(proxy.endpoint))
        if conflicts < CONFLICT_ATTEMPTS:
            version = storage.write_if_match("f", b"ours", expected)
            assert direct.read_versioned("f") == (b"ours", version)
        else:  # it stops, and says why
            with pytest.raises(StorageError, match="S3 error ConditionalRequestConflict") as excinfo:
                storage.write_if_match("f", b"ours", expected)
            assert not isinstance(excinfo.value, ObjectAlreadyExistsError | VersionMismatchError)
            assert direct.read("f") == b"before" if kind == "swap" else not direct.exists("f")
    assert len(puts) == min(conflicts + 1, CONFLICT_ATTEMPTS)


@pytest.mark.s3
def test_s3_create_if_absent_tries_a_conflict_again(moto_server: str) -> None:
    bucket = create_bucket(moto_server)
    answers = [s3_error(409, "ConditionalRequestConflict", "A conflicting conditional operation is in progress.")]

    def hook(method: str, path: str, headers: dict[str, str], body: bytes, forward: Forward) -> Answer | None:
        return answers.pop() if is_conditional_put(method, headers) and answers else None

    with FaultProxy(moto_server, hook) as proxy:
        open_storage(f"s3://{bucket}/t", s3_options(proxy.endpoint)).create_if_absent(".hoodie/1.commit", b"ours")
    assert open_storage(f"s3://{bucket}/t", s3_options(moto_server)).read(".hoodie/1.commit") == b"ours"


@pytest.mark.s3
@pytest.mark.parametrize(("kind", "header"), [("create", "If-None-Match"), ("swap", "If-Match")])
def test_s3_endpoint_without_conditional_writes_is_named(moto_server: str, kind: str, header: str) -> None:
    """An S3-compatible store that refuses conditional PUTs (501 NotImplemented) was reported as a
    bare "S3 error NotImplemented": the error now says that tidemark needs conditional writes."""
    bucket = create_bucket(moto_server)
    direct = open_storage(f"s3://{bucket}/t", s3_options(moto_server))
    expected = None if kind == "create" else direct.write_if_match("f", b"before", None)

    def hook(method: str, path: str, headers: dict[str, str], body: bytes, forward: Forward) -> Answer | None:
        if is_conditional_put(method, headers):
            return s3_error(
                501, "NotImplemented", "A header you provided implies functionality that is not implemented"
            )
        return None

    with FaultProxy(moto_server, hook) as proxy:
        storage = open_storage(f"s3://{bucket}/t", s3_options(proxy.endpoint))
        with pytest.raises(StorageError) as excinfo:
            storage.write_if_match("f", b"ours", expected)
        if kind == "create":
            with pytest.raises(StorageError, match="does not support conditional writes"):
                storage.create_if_absent("g", b"ours")
    message = str(excinfo.value)
    assert f"the S3 endpoint {proxy.endpoint} does not support conditional writes" in message
    assert f"a PUT with {header} was answered NotImplemented" in message
    assert "tidemark needs them to commit atomically" in message
    assert not isinstance(excinfo.value, ObjectAlreadyExistsError | VersionMismatchError)


@pytest.mark.parametrize("where", ["local", pytest.param("s3", marks=pytest.mark.s3)])
def test_list_names_by_prefix(where: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """The look-up early conflict detection makes in a rival's marker folder: only the names that
    start with a prefix, from a folder's direct files."""
    store: Storage = LocalStorage(tmp_path / "root") if where == "local" else request.getfixturevalue("s3_storage")
    for name in ("fg_1-x_0-1-0_1.parquet", ".fg_1-x_2_1.log.1_0-1-0", "fg_1-x_2_0-1-0_1.parquet", "other"):
        store.write(f"m/p=a_b/{name}", b"")
    store.write("m/p=a_b/deeper/fg_1-x_0-1-0_1.parquet", b"")
    assert sorted(store.list_names("m/p=a_b", ("fg_1-x_", ".fg_1-x_"))) == [
        ".fg_1-x_2_1.log.1_0-1-0",
        "fg_1-x_0-1-0_1.parquet",
        "fg_1-x_2_0-1-0_1.parquet",
    ]
    assert store.list_names("m/p=a_b", ("nothing_",)) == ()
    assert store.list_names("absent", ("fg_",)) == ()
