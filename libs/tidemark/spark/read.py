"""Snapshot reads as Spark DataFrames, through the ``tidemark`` data source (read on executors)."""

from __future__ import annotations

import os
from collections.abc import Mapping

from pyspark.sql import DataFrame, SparkSession

from tidemark.spark.datasource import AS_OF_INSTANT, SOURCE_NAME, register, s3_reader_options
from tidemark.storage import S3Options


def read_dataframe(
    spark: SparkSession,
    location: str | os.PathLike[str],
    as_of: str | None = None,
    s3: S3Options | None = None,
    options: Mapping[str, str] | None = None,
) -> DataFrame:
    """The table's snapshot (meta columns included) as a DataFrame: the same as
    ``spark.read.format("tidemark").load(location)`` once :func:`register` has run. ``options``:
    the source's (an incremental query's, for one)."""
    register(spark)
    reader = spark.read.format(SOURCE_NAME).options(**s3_reader_options(s3), **dict(options or {}))
    if as_of is not None:
        reader = reader.option(AS_OF_INSTANT, as_of)
    return reader.load(os.fspath(location))
