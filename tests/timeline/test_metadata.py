"""Commit metadata as Hudi writes it (JSON): what does not have its shape is refused with the
file named, never read as something else."""

from __future__ import annotations

import json

import pytest

from tidemark.errors import InstantMetadataError
from tidemark.timeline import CommitMetadata


def test_replaced_file_ids_are_lists_of_file_ids() -> None:
    good = CommitMetadata.from_bytes(json.dumps({"partitionToReplaceFileIds": {"p": ["fg-1", "fg-2"]}}).encode())
    assert good.partition_to_replace_file_ids == {"p": ("fg-1", "fg-2")}
    # a string passed as one-letter file ids: the replaced groups came back into every read
    for ids in ("fg-1", [1, 2], {"x": 1}):
        data = json.dumps({"partitionToReplaceFileIds": {"p": ids}}).encode()
        with pytest.raises(InstantMetadataError, match=r"x\.replacecommit does not have Hudi's commit metadata shape"):
            CommitMetadata.from_bytes(data, "x.replacecommit")
