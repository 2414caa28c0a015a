"""A child process for the table lock's tests (``python -m tests.support.lock_worker``): another
process on the same table, which the tests kill, stop and race. It reports on stdout, one JSON
object per line, and reads its cues from stdin.

Modes:

- ``hold``: take the lock, report ``held``, then hold it (renewing) until killed;
- ``commit``: take the lock, report ``held``, wait for a line on stdin, then ``check_held()`` and,
  only if that passes, create the file ``commit`` (its "commit"); report ``committed``, or
  ``fenced`` and exit with status 3;
- ``count``: report ``ready``, wait for a line on stdin, then ``--rounds`` times: take the lock,
  read the file ``counter``, pause, ``check_held()``, write the counter plus one, release; report
  ``done`` with the fencing numbers it got and the process's lock counters;
- ``write``: report ``ready``, wait for a line on stdin, then ``--rounds`` times: a whole write
  through the write client with optimistic concurrency (begin, one base file of a new file group
  holding one row ``<pid>-<round>``, commit); report ``done`` with the instants it committed and
  the process's lock counters. The table must exist.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from typing import Any

from tests.support.table_builder import PARTITION, _table
from tidemark.errors import LockLostError
from tidemark.storage import Storage, open_storage
from tidemark.table.avro_schema import avro_schema_json
from tidemark.table.concurrency import COUNTERS, ConcurrencyConfig
from tidemark.table.lock import TableLock
from tidemark.table.write_client import begin_write
from tidemark.table.write_handles import TaskContext, create_base_file
from tidemark.timeline import DELTA_COMMIT

#: the exit status of a holder fenced off at its commit
FENCED = 3


def report(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def _storage(location: str, endpoint: str | None) -> Storage:
    if endpoint is None:
        return open_storage(location)
    from tests.support.s3 import s3_options

    return open_storage(location, s3_options(endpoint))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="lock_worker")
    parser.add_argument("mode", choices=["hold", "commit", "count", "write"])
    parser.add_argument("location")
    parser.add_argument("--endpoint", help="the moto S3 endpoint, for s3:// locations")
    parser.add_argument("--lease-ms", type=int, default=1_000)
    parser.add_argument("--wait-ms", type=int, default=60_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--pause-ms", type=int, default=10)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(name)s %(levelname)s %(message)s")

    storage = _storage(args.location, args.endpoint)
    config = ConcurrencyConfig(lock_lease_ms=args.lease_ms, lock_wait_ms=args.wait_ms, lock_num_retries=0)
    lock = TableLock(storage, config)

    if args.mode == "count":
        report("ready")
        sys.stdin.readline()
        fences = []
        for _ in range(args.rounds):
            with lock:
                fences.append(lock.check_held().fence)
                count = int(storage.read("counter")) if storage.exists("counter") else 0
                time.sleep(args.pause_ms / 1000)  # a window for a lost update, were the lock broken
                lock.check_held()
                storage.write("counter", str(count + 1).encode())
        report("done", fences=fences, counters=COUNTERS.snapshot())
        return 0

    if args.mode == "write":
        report("ready")
        sys.stdin.readline()
        instants = [_write_one(storage, config, f"{os.getpid()}-{n}") for n in range(args.rounds)]
        report("done", instants=instants, counters=COUNTERS.snapshot())
        return 0

    lease = lock.acquire()
    report("held", owner=lease.owner, fence=lease.fence, expiration_ms=lease.expiration_ms)
    if args.mode == "hold":
        while True:
            time.sleep(60)

    sys.stdin.readline()
    try:
        lock.check_held()
    except LockLostError as e:
        lock.release()  # must neither raise nor touch the new holder's lease
        report("fenced", error=str(e))
        return FENCED
    storage.create_if_absent("commit", lock.owner.encode())
    lock.release()
    report("committed")
    return 0


def _write_one(storage: Storage, config: ConcurrencyConfig, key: str) -> str:
    write = begin_write(storage, DELTA_COMMIT, "insert", config)
    rows = _table([key], 1)
    ctx = TaskContext(write.instant, 0, 0, 0)
    schema = avro_schema_json(rows.schema, "t")
    stat = create_base_file(storage, ctx, PARTITION, f"fg-{key}", rows, rows["id"], schema)
    write.commit([stat], "insert", schema)
    return write.instant


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
