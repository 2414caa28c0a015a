"""A local Spark session for the CLI and tests (``local[2]`` unless configured)."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping

from pyspark.logger import PySparkLogger
from pyspark.sql import SparkSession

from tidemark.errors import SparkStartError

#: PySpark's loggers of a failed query's context: each failure as a JSON line with Java's stack
#: trace (some 4 KB), before tidemark's one-line error
_QUERY_CONTEXT_LOGGERS = ("DataFrameQueryContextLogger", "SQLQueryContextLogger")


def local_session(
    master: str | None = None, app_name: str = "tidemark", conf: Mapping[str, str] | None = None
) -> SparkSession:
    """The session, with the ``spark.*`` keys of ``conf`` (a command's ``--conf``) set over
    tidemark's defaults; ``spark.master`` is ``master``'s default."""
    spark_conf = {k: v for k, v in (conf or {}).items() if k.startswith("spark.") and k != "spark.master"}
    master = master or (conf or {}).get("spark.master")
    # Python workers must run this interpreter (the one with tidemark installed), not PATH's
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # local mode talks to itself only: keep it on loopback, whatever the hostname resolves to
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    master = master or os.environ.get("TIDEMARK_SPARK_MASTER", "local[2]")
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.python.daemon.module", "tidemark.spark.worker_daemon")
        .config("spark.driver.memory", os.environ.get("TIDEMARK_SPARK_DRIVER_MEMORY", "2g"))
    )
    for key, value in spark_conf.items():
        builder = builder.config(key, value)
    try:
        session = builder.getOrCreate()
    except Exception as e:  # PySpark's own error; the JVM printed its reason above it
        reason = " ".join(str(e).split()) or type(e).__name__
        given = f"; and the --conf settings {', '.join(sorted(spark_conf))} must be Spark's" if spark_conf else ""
        raise SparkStartError(
            f"Spark ({master}) could not start: {reason} (Java's output above says why: Java 17 on PATH "
            f"or JAVA_HOME, free memory, and open files (ulimit -n) are what it needs{given})"
        ) from e
    try:  # a SQL setting is checked only once a query reads it, where its error named the input
        runtime = session.conf if spark_conf else None
        for key, value in spark_conf.items():
            if runtime is not None and runtime.isModifiable(key):
                runtime.set(key, value)
    except Exception as e:
        reason = " ".join(str(e).split("\n")[0].split()) or type(e).__name__
        raise SparkStartError(f"a --conf spark.* setting is refused by Spark: {reason}") from None
    # a task's failure comes back as tidemark's own one-line error; Spark's logs of it (every
    # attempt's traceback, some eighty lines) only bury that line
    level = os.environ.get("TIDEMARK_SPARK_LOG_LEVEL", "FATAL")
    session.sparkContext.setLogLevel(level)
    for name in _QUERY_CONTEXT_LOGGERS:
        PySparkLogger.getLogger(name).setLevel(logging.CRITICAL if level.upper() in ("FATAL", "OFF") else logging.ERROR)
    return session
