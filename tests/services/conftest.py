"""Fixtures of the writer-coordinator's process tests: a table, fresh topics, a running coordinator."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.kafka import TansuBroker
from tests.support.services import CoordinatorProcess, create_topics, unique_topics
from tidemark.storage import LocalStorage
from tidemark.table.write_client import create_table


@pytest.fixture
def table(tmp_path: Path) -> LocalStorage:
    storage = LocalStorage(tmp_path / "table")
    create_table(storage, "t", ["id"], "ts", ["p"], True)
    return storage


@pytest.fixture
def topics(kafka_broker: TansuBroker) -> tuple[str, str]:
    topic, dead = unique_topics("coordinator")
    create_topics(kafka_broker.bootstrap, [topic, dead])
    return topic, dead


@pytest.fixture
def coordinator(kafka_broker: TansuBroker, topics: tuple[str, str]) -> Iterator[CoordinatorProcess]:
    """A coordinator process (with an API token of its own) serving markers, ready."""
    with CoordinatorProcess(kafka_broker.bootstrap, *topics) as proc:
        proc.start()
        proc.wait_ready()
        yield proc
