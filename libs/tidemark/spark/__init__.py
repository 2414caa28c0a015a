"""The Spark adapter: write jobs and DataFrame reads. The only package that imports pyspark.

``tidemark.spark.register(spark)`` registers the ``tidemark`` data source
(``spark.read.format("tidemark").load(path)``); ``tidemark.spark.write(df, path, **hudi_options)``
writes with a Hudi options dict."""

from tidemark.spark.datasource import register
from tidemark.spark.hudi_options import write

__all__ = ["register", "write"]
