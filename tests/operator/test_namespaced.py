"""The operator watching one namespace (``--namespace``, the chart's default: a Role per watched
namespace and a KopfPeering in each): it schedules the HudiTables of its namespace and leaves a
HudiTable of another namespace alone (no finalizer, no status, no request)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.support.kafka import TansuBroker
from tests.support.kube import NS, KubeApi, Operator, Topic, conditions, eventually, resource, tables
from tests.support.table_builder import TableBuilder
from tidemark.events import EventType
from tidemark.storage import open_storage

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(120)]

OTHER = "elsewhere"


def test_an_operator_of_one_namespace_schedules_its_tables_only(
    kube: KubeApi, kafka_broker: TansuBroker, topic: Topic, tmp_path: Path
) -> None:
    locations = {}
    for ns in (NS, OTHER):
        kube.add_namespace(ns)
        locations[ns] = str(tmp_path / ns / "orders")
        TableBuilder(open_storage(locations[ns])).insert(["a", "b"])
    operator = Operator(kube, kafka_broker.bootstrap, topic.name, namespaces=[NS]).start()
    try:
        spec = {"clean": {"interval": "1s"}, "concurrencyPolicy": "Allow"}
        for ns in (NS, OTHER):
            kube.create(tables(ns), resource("orders", {"location": locations[ns], **spec}, ns))

        # its own namespace: Ready, its finalizer set, requests published
        eventually(lambda: conditions(kube, "orders").get("Ready", {}).get("status") == "True", 60, "Ready in " + NS)
        mine = kube.get(f"{tables(NS)}/orders")
        assert mine["metadata"].get("finalizers"), mine["metadata"]

        def requested() -> list[str]:
            return [e.table for e in topic.requests(EventType.CLEAN_REQUESTED)]

        eventually(lambda: locations[NS] in requested(), 30, "a clean.requested for the table of " + NS)
        time.sleep(2)  # a few more fire times pass

        # the other namespace: untouched, as if no operator ran
        theirs = kube.get(f"{tables(OTHER)}/orders")
        assert "status" not in theirs or not theirs["status"], theirs
        assert not theirs["metadata"].get("finalizers"), theirs["metadata"]
        assert not any(a.startswith("tidemark.io/") for a in theirs["metadata"].get("annotations") or {})
        assert locations[OTHER] not in requested()
        assert "tidemark_operator_tables_managed 1.0" in operator.metrics()
        # its namespace's peering object is the one the operator keeps its record in
        peering = kube.get(f"/apis/kopf.dev/v1/namespaces/{NS}/kopfpeerings/tidemark-operator")
        assert peering["status"], peering
        assert operator.alive
    finally:
        operator.stop()
        operator.close()
