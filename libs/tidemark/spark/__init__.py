"""The Spark adapter: write jobs and DataFrame reads. The only package that imports pyspark."""
