"""Snapshot reads as Spark DataFrames."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

from tidemark.storage import S3Options, open_storage
from tidemark.table.snapshot import read_snapshot


def read_dataframe(
    spark: SparkSession, location: str, as_of: str | None = None, s3: S3Options | None = None
) -> DataFrame:
    """The table's snapshot (meta columns included) as a DataFrame."""
    table = read_snapshot(open_storage(location, s3), as_of)
    return spark.createDataFrame(table)
