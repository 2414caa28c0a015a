"""A fire time is requested when it comes, not at the operator's next look at the table: the real
operator process (kmock's API emulator, a tansu broker) looking at its table every 8 s, the
table's clean due every second."""

from __future__ import annotations

from datetime import timedelta
from itertools import pairwise
from pathlib import Path

import pytest

from tests.support.kafka import TansuBroker
from tests.support.kube import TABLES, KubeApi, Operator, Topic, eventually, resource, status
from tests.support.table_builder import TableBuilder
from tidemark.events import EventType
from tidemark.storage import open_storage
from tidemark_operator.schedule import time_of

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(120)]


def _run(topic: Topic, n: int) -> list[str] | None:
    """The latest ``n`` clean requests' instants, if they are ``n`` consecutive fire times."""
    instants = sorted(e.instant for e in topic.requests(EventType.CLEAN_REQUESTED))
    tail = [time_of(i) for i in instants[-n:]]
    if len(tail) == n and all(b - a == timedelta(seconds=1) for a, b in pairwise(tail)):
        return instants
    return None


def test_every_fire_time_between_two_looks_is_requested(
    kube: KubeApi, kafka_broker: TansuBroker, topic: Topic, tmp_path: Path
) -> None:
    location = str(tmp_path / "orders")
    TableBuilder(open_storage(location)).insert(["a", "b"])
    operator = Operator(kube, kafka_broker.bootstrap, topic.name, "--tick", "8").start()
    try:
        spec = {"location": location, "clean": {"interval": "1s"}, "concurrencyPolicy": "Allow"}
        kube.create(TABLES, resource("orders", spec))
        eventually(lambda: status(kube, "orders").get("phase") == "Ready", 30, "Ready")
        # a look every 8 s would request one fire time in eight; each second's is requested
        instants = eventually(lambda: _run(topic, 6), 40, "six consecutive fire times requested")
        assert len(instants) == len(set(instants))  # and each once
        # the status records them when the look ends (with the next fire time)
        shown = eventually(lambda: status(kube, "orders").get("requests", {}).get("clean"), 20, "the requests shown")
        assert shown["instant"] >= instants[-1]
        assert operator.alive
    finally:
        operator.stop()
        operator.close()
