"""tidemark: Apache Hudi table services (Merge-On-Read and copy-on-write) in Python, table version 6."""

__version__ = "0.1.0"
