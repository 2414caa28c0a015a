"""Pytest plugin: one local Spark session for the whole test run (startup takes ~10 s), for every
directory that writes through Spark (tests/spark, the operator's end to end). ``local[2,4]``: two
cores, and up to four attempts per task, so tests can make Spark retry tasks for real.

Registered from ``tests/conftest.py``; pyspark is imported inside the fixture, so tests that never
ask for Spark run without it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    pyspark = pytest.importorskip("pyspark", reason="pyspark is not installed")
    from tidemark.spark.session import local_session

    session = local_session("local[2,4]", app_name="tidemark-tests")
    session.sparkContext.setLogLevel("ERROR")
    assert pyspark.__version__
    yield session
    session.stop()


@contextlib.contextmanager
def ansi_off(spark: Any) -> Iterator[None]:
    """The shared session without ANSI mode (Spark 4's default is on) for the block: what Spark
    computes then (integers wrap, a decimal overflow is null) is what tidemark must compute too."""
    before = spark.conf.get("spark.sql.ansi.enabled")
    spark.conf.set("spark.sql.ansi.enabled", "false")
    try:
        yield
    finally:
        spark.conf.set("spark.sql.ansi.enabled", before)
