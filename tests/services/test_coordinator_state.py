"""The writer-coordinator's per-table state in process (no HTTP, no Kafka): what its marker flush
writes for a write that another process rolled back."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tidemark.storage import LocalStorage
from tidemark.table.concurrency import ConcurrencyConfig
from tidemark.table.markers import IOType, Marker, list_markers, markers_folder
from tidemark.table.write_client import PendingWrite, begin_write, rollback
from tidemark_services.coordinator_state import TableState

LIVE = ConcurrencyConfig(heartbeat_interval_ms=60_000, early_detection=True)


def _markers(write: PendingWrite, count: int, start: int = 0) -> list[Marker]:
    return [
        Marker(write.instant, f"p=1/fg-{i}_0-1-0_{write.instant}.parquet", IOType.CREATE)
        for i in range(start, start + count)
    ]


def _folder_exists(table: LocalStorage, instant: str) -> bool:
    return (table.root / markers_folder(instant)).exists()


def test_markers_accepted_for_a_write_another_process_rolled_back_are_not_flushed_and_its_state_goes(
    table: LocalStorage,
) -> None:
    a = begin_write(table, "deltacommit", "insert", LIVE)
    state = TableState.load(str(table.root), table, LIVE)
    with ThreadPoolExecutor(2) as pool:
        state.create_markers(a.instant, _markers(a, 3))
        state.flush(pool)
        assert len(list_markers(table, a.instant)) == 3
        # its tasks go on marking while its driver stalls; another process rolls it back meanwhile
        results, _, _ = state.create_markers(a.instant, _markers(a, 2, start=3))
        rollback(table, a.instant, own=True)
        assert not _folder_exists(table, a.instant)
        batch, _ = state.flush(pool)
    assert batch.done.is_set()
    assert batch.error is None
    assert not _folder_exists(table, a.instant)  # was: MARKERS0 written again, listing 5 deleted files
    # its waiting requests are released, their markers not on storage (answered 410, below)
    assert all(r.batch is not None for r in results)
    assert all(state.unflushed(a.instant, m.name) is None for m in _markers(a, 2, start=3))
    assert a.instant not in state.writes
    assert state.marker_count() == 0
    assert not state.is_pending(a.instant)  # its tasks' next requests are answered 410


class _RolledBackWhileWritten(LocalStorage):
    """Storage on which the write ``target`` is rolled back (by another process) while its first
    new ``MARKERS<N>`` file is being created: after the flush found it pending, before the file lands."""

    def __init__(self, root: Path, target: str) -> None:
        super().__init__(root)
        self.target = target
        self.done = False

    def create_if_absent(self, path: str, data: bytes) -> None:
        if not self.done and path.startswith(markers_folder(self.target) + "MARKERS") and not path.endswith(".type"):
            self.done = True
            rollback(LocalStorage(self.root), self.target, own=True)
        super().create_if_absent(path, data)


def test_a_marker_file_written_while_its_write_was_rolled_back_is_taken_back(table: LocalStorage) -> None:
    a = begin_write(table, "deltacommit", "insert", LIVE)
    storage = _RolledBackWhileWritten(table.root, a.instant)
    state = TableState.load(str(table.root), storage, LIVE)
    state.create_markers(a.instant, _markers(a, 3))
    with ThreadPoolExecutor(2) as pool:
        batch, _ = state.flush(pool)
    assert storage.done
    assert batch.error is None
    assert not _folder_exists(table, a.instant)
    assert a.instant not in state.writes
    assert not state.is_pending(a.instant)


class _BrokenFor(LocalStorage):
    """Storage on which creating a ``MARKERS<N>`` file of the write ``target`` fails with an error
    that is not a storage failure (a bug, a value storage does not take)."""

    def __init__(self, root: Path, target: str) -> None:
        super().__init__(root)
        self.target = target

    def create_if_absent(self, path: str, data: bytes) -> None:
        if path.startswith(markers_folder(self.target) + "MARKERS") and not path.endswith(".type"):
            raise ValueError("not for this write")
        super().create_if_absent(path, data)


def test_one_write_whose_markers_fail_to_be_written_does_not_hold_up_the_others_in_its_batch(
    table: LocalStorage,
) -> None:
    """An error other than a storage failure in one write's file escaped the flush: the batch was
    never released, and the other writes' requests in it waited for their deadline, then fell back."""
    bad = begin_write(table, "deltacommit", "insert", LIVE)
    good = begin_write(table, "deltacommit", "insert", LIVE)
    state = TableState.load(str(table.root), _BrokenFor(table.root, bad.instant), LIVE)
    state.create_markers(bad.instant, _markers(bad, 2))
    results, _, _ = state.create_markers(good.instant, _markers(good, 3, start=10))
    with ThreadPoolExecutor(2) as pool:
        batch, _ = state.flush(pool)
    assert batch.done.is_set()
    assert batch.error is not None
    assert f"markers of {bad.instant}: ValueError: not for this write" in batch.error
    # the good write's markers are on storage, and its requests are answered at once
    assert len(list_markers(table, good.instant)) == 3
    assert all(r.batch is batch for r in results)
    assert all(state.unflushed(good.instant, m.name) is None for m in _markers(good, 3, start=10))
    # the bad write's are left to the next batch (its requests are answered 503 and fall back)
    assert all(state.unflushed(bad.instant, m.name) is not None for m in _markers(bad, 2))
