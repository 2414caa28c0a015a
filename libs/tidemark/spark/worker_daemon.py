"""PySpark's Python worker daemon, without a traceback for a worker whose task was cancelled
before it reached the worker.

A Ctrl-C cancels the command's Spark jobs (:mod:`tidemark.spark.interrupts`). A worker being
started for a task just then finds its connection closed before the task's first byte, and
PySpark's daemon printed the worker's ``EOFError`` traceback on the command's stderr, under the
command's one-line message. Such a worker has nothing to report: it ends quietly. Everything else
is PySpark's daemon as it is (``spark.python.daemon.module`` names this module).
"""

from __future__ import annotations

import socket

from pyspark import daemon

_pyspark_worker = daemon.worker


def _worker(sock: socket.socket, authenticated: bool) -> int:
    try:
        return _pyspark_worker(sock, authenticated)
    except (EOFError, ConnectionError):  # Spark closed the connection: its task is gone
        return 1


if __name__ == "__main__":
    daemon.worker = _worker  # the name the daemon's loop calls each forked worker by
    daemon.manager()
