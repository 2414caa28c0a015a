"""Settings and counters for several writers on one table, under Hudi's keys.

The settings are read once per write from ``--conf``; the counters are process-wide and only ever
go up, so a service (the writer-coordinator) can export them as Prometheus counters.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass

from tidemark.config import conf_bool, conf_int, conf_value
from tidemark.errors import TableError

OPTIMISTIC = "OPTIMISTIC_CONCURRENCY_CONTROL"
SINGLE_WRITER = "SINGLE_WRITER"
MODES = (OPTIMISTIC, SINGLE_WRITER)

MODE_KEY = "hoodie.write.concurrency.mode"
HEARTBEAT_INTERVAL_KEY = "hoodie.client.heartbeat.interval_in_ms"
HEARTBEAT_MISSES_KEY = "hoodie.client.heartbeat.tolerable.misses"
LOCK_WAIT_KEY = "hoodie.write.lock.wait_time_ms"
LOCK_RETRIES_KEY = "hoodie.write.lock.num_retries"
LOCK_RETRY_WAIT_KEY = "hoodie.write.lock.wait_time_ms_between_retry"
#: Hudi 1.x's storage-based lock provider names its lease this way
LOCK_LEASE_KEY = "hoodie.write.lock.storage.validity.timeout.secs"
EARLY_DETECTION_KEY = "hoodie.write.concurrency.early.conflict.detection.enable"
EARLY_COMMIT_CHECK_KEY = "hoodie.write.concurrency.early.conflict.check.commit.conflict"
ASYNC_DELAY_KEY = "hoodie.write.concurrency.async.conflict.detector.initial_delay_ms"
ASYNC_PERIOD_KEY = "hoodie.write.concurrency.async.conflict.detector.period_ms"


@dataclass(frozen=True)
class ConcurrencyConfig:
    """Hudi's multi-writer settings. Optimistic concurrency is the default: a second writer on a
    table is common (a backfill beside a stream), and its cost on an unopposed write is one lock
    round trip at commit (see ``make bench``). ``SINGLE_WRITER`` writes skip the lock and the
    checks (a compaction plans none while a write is pending); heartbeats
    apply in both modes, so a live writer is never rolled back by another."""

    mode: str = OPTIMISTIC
    heartbeat_interval_ms: int = 60_000
    heartbeat_tolerable_misses: int = 2
    lock_wait_ms: int = 60_000
    lock_num_retries: int = 15
    lock_retry_wait_ms: int = 1_000
    lock_lease_ms: int = 60_000
    early_detection: bool = False
    early_check_commit_conflict: bool = False
    async_detector_initial_delay_ms: int = 0
    async_detector_period_ms: int = 30_000

    @property
    def optimistic(self) -> bool:
        return self.mode == OPTIMISTIC

    @property
    def heartbeat_expiry_ms(self) -> int:
        """How old a heartbeat may be before its writer counts as dead (Hudi: interval times misses)."""
        return self.heartbeat_interval_ms * max(1, self.heartbeat_tolerable_misses)

    @classmethod
    def from_conf(cls, conf: Mapping[str, str]) -> ConcurrencyConfig:
        mode = conf_value(conf, MODE_KEY, default=OPTIMISTIC).strip().upper()
        if mode not in MODES:
            raise TableError(f"{MODE_KEY}={mode!r}: use one of {', '.join(MODES)}")
        return cls(
            mode=mode,
            heartbeat_interval_ms=conf_int(conf, HEARTBEAT_INTERVAL_KEY, cls.heartbeat_interval_ms, least=1),
            heartbeat_tolerable_misses=conf_int(conf, HEARTBEAT_MISSES_KEY, cls.heartbeat_tolerable_misses, least=1),
            lock_wait_ms=conf_int(conf, LOCK_WAIT_KEY, cls.lock_wait_ms),
            lock_num_retries=conf_int(conf, LOCK_RETRIES_KEY, cls.lock_num_retries),
            lock_retry_wait_ms=conf_int(conf, LOCK_RETRY_WAIT_KEY, cls.lock_retry_wait_ms),
            lock_lease_ms=conf_int(conf, LOCK_LEASE_KEY, cls.lock_lease_ms // 1000, least=1) * 1000,
            early_detection=conf_bool(conf, EARLY_DETECTION_KEY, default=cls.early_detection),
            early_check_commit_conflict=conf_bool(
                conf, EARLY_COMMIT_CHECK_KEY, default=cls.early_check_commit_conflict
            ),
            async_detector_initial_delay_ms=conf_int(conf, ASYNC_DELAY_KEY, cls.async_detector_initial_delay_ms),
            async_detector_period_ms=conf_int(conf, ASYNC_PERIOD_KEY, cls.async_detector_period_ms, least=1),
        )


class ConcurrencyCounters:
    """Process-wide counts of what concurrency control did: conflicts found early and at commit,
    times a writer waited for the table lock, expired leases taken over, and writers that fell
    back from the writer-coordinator to direct markers. Thread-safe."""

    NAMES = (
        "conflicts_early",
        "conflicts_at_commit",
        "lock_waits",
        "lock_takeovers",
        "early_check_errors",
        "coordinator_fallbacks",
    )

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values = dict.fromkeys(self.NAMES, 0)

    def add(self, name: str, amount: int = 1) -> None:
        if name not in self._values:
            raise KeyError(f"unknown concurrency counter {name!r} (known: {', '.join(self.NAMES)})")
        with self._lock:
            self._values[name] += amount

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._values)


#: the counters of this process
COUNTERS = ConcurrencyCounters()
