"""Conditional writes (compare-and-swap) on local files and on S3 (the moto server over HTTP): what
the table lock is built on."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from tidemark.errors import ObjectAlreadyExistsError, ObjectNotFoundError, VersionMismatchError
from tidemark.storage import LocalStorage, Storage


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Storage:
    if request.param == "local":
        return LocalStorage(tmp_path)
    s3: Storage = request.getfixturevalue("s3_storage")
    return s3


def test_create_then_swap_on_the_version_read(storage: Storage) -> None:
    v1 = storage.write_if_match("locks/a.json", b"one", None)
    with pytest.raises(ObjectAlreadyExistsError):
        storage.write_if_match("locks/a.json", b"again", None)
    data, version = storage.read_versioned("locks/a.json")
    assert (data, version) == (b"one", v1)
    v2 = storage.write_if_match("locks/a.json", b"two", v1)
    assert v2 != v1
    assert storage.read_versioned("locks/a.json") == (b"two", v2)


def test_a_stale_version_is_refused_and_changes_nothing(storage: Storage) -> None:
    v1 = storage.write_if_match("a", b"one", None)
    storage.write_if_match("a", b"two", v1)
    with pytest.raises(VersionMismatchError, match="a"):
        storage.write_if_match("a", b"three", v1)
    assert storage.read("a") == b"two"
    with pytest.raises(VersionMismatchError):
        storage.write_if_match("gone", b"x", v1)
    assert not storage.exists("gone")
    with pytest.raises(ObjectNotFoundError):
        storage.read_versioned("gone")


def test_the_same_bytes_written_again_are_a_new_version(tmp_path: Path) -> None:
    """Locally, every write is a new version. (On S3 the version is the ETag, a hash of the bytes:
    the table lock's lease always changes, its expiry is in it.)"""
    storage = LocalStorage(tmp_path)
    v1 = storage.write_if_match("a", b"same", None)
    time.sleep(0.01)
    v2 = storage.write_if_match("a", b"same", v1)
    with pytest.raises(VersionMismatchError):
        storage.write_if_match("a", b"same", v1)
    assert storage.read_versioned("a")[1] == v2


def test_of_racers_on_one_version_exactly_one_wins(storage: Storage) -> None:
    version = storage.write_if_match("counter", b"0", None)
    wins: list[int] = []
    losses: list[int] = []
    barrier = threading.Barrier(8)

    def racer(n: int) -> None:
        barrier.wait()
        try:
            storage.write_if_match("counter", str(n).encode(), version)
            wins.append(n)
        except VersionMismatchError:
            losses.append(n)

    threads = [threading.Thread(target=racer, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 1
    assert len(losses) == 7
    assert storage.read("counter") == str(wins[0]).encode()


def test_modified_time_is_when_the_file_was_written(storage: Storage) -> None:
    before = int(time.time() * 1000)
    storage.write("a", b"x")
    modified = storage.modified_ms("a")
    # S3 keeps whole seconds; a second of slack either way covers both stores and the clock
    assert before - 1_000 <= modified <= int(time.time() * 1000) + 1_000
    with pytest.raises(ObjectNotFoundError):
        storage.modified_ms("missing")


def test_local_swap_leaves_no_side_files_in_listings(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path)
    v = storage.write_if_match("d/a", b"1", None)
    storage.write_if_match("d/a", b"2", v)
    assert [f.path for f in storage.list("d/")] == ["d/a"]
    assert storage.list_dir("d").files == ("a",)
