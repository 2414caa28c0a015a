"""The operator tests' fixtures: the Kubernetes API emulator (tests/support/kube.py), and a new
topic whose events are read from the start."""

from collections.abc import Iterator

import pytest

from tests.support.kafka import TansuBroker
from tests.support.kube import Topic, kube

__all__ = ["kube"]


@pytest.fixture
def topic(kafka_broker: TansuBroker) -> Iterator[Topic]:
    t = Topic(kafka_broker.bootstrap)
    yield t
    t.close()
