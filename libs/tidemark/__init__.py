"""tidemark: Apache Hudi Merge-On-Read table services in Python (table version 6)."""

__version__ = "0.1.0"
