"""The Spark tests' session fixture ``spark`` is tests/support/spark.py's (one for the whole run)."""
