"""The cleaner and archiver while no broker is in reach: kafka-python's poll returns nothing then,
as for an idle topic, so both answered ``ok`` on every probe and counted nothing."""

from __future__ import annotations

from tests.support.kafka import TansuBroker
from tests.support.processes import free_port
from tests.support.services import (
    ServiceProcess,
    create_topics,
    logs,
    service_processes,
    unique_topics,
    wait_until,
)
from tidemark_services.runtime import BROKER_GRACE_S


def _unready(proc: ServiceProcess) -> bool:
    return proc.readiness()[0] == 503


def test_a_broker_out_of_reach_makes_the_services_unready_not_unhealthy(fresh_broker: TansuBroker) -> None:
    topic, dead = unique_topics("outage")
    create_topics(fresh_broker.bootstrap, [topic, dead])
    with (
        service_processes(["cleaner", "archiver"], fresh_broker.bootstrap, topic, dead) as procs,
        ServiceProcess("cleaner", f"127.0.0.1:{free_port()}", topic, dead) as never,  # nobody listens there
    ):
        never.start()
        never.wait_ready()
        wait_until(lambda: all(p.readiness()[0] == 200 for p in procs), 30, "ready", detail=lambda: logs(*procs))
        fresh_broker.stop()
        everyone = [*procs, never]
        wait_until(
            lambda: all(_unready(p) for p in everyone), BROKER_GRACE_S + 30, "unready", detail=lambda: logs(*everyone)
        )
        for proc in everyone:
            status, body = proc.readiness()
            assert body.startswith(f"{proc.name}: no broker of 127.0.0.1:"), body
            assert "in reach for" in body, body
            status, body = proc.health()
            assert status == 200, body  # a restart would not bring the broker back
            assert body.startswith(f"{proc.name}: ok (no broker of"), body
            # counted by the service's poll loop at its next look, which a loaded machine delays
            # past the moment /readyz (served by another thread, from the time) turned
            wait_until(
                lambda proc=proc: proc.metric("tidemark_broker_errors_total", service=proc.name) == 1,
                30,
                "the outage counted once",
                detail=proc.log_tail,
            )
            assert proc.metric("tidemark_broker_unreachable_seconds", service=proc.name) >= BROKER_GRACE_S
            assert "in reach for" in proc.log_tail(100_000)
        # kafka-python's own lines (each failed connection attempt, at ERROR, for every client the
        # service made anew): about 20 a second, where each is now said once a minute
        chatter = [
            line
            for line in never.log_tail(10_000_000).splitlines()
            if "<BrokerConnection" in line or "No node available" in line
        ]
        assert 0 < len(chatter) <= 20, "\n".join(chatter[:40])
        fresh_broker.start()  # memory storage: the topics are gone with the old process
        create_topics(fresh_broker.bootstrap, [topic, dead])
        wait_until(lambda: not any(_unready(p) for p in procs), 60, "ready again", detail=lambda: logs(*procs))
        for proc in procs:
            assert proc.metric("tidemark_broker_unreachable_seconds", service=proc.name) == 0
            assert "in reach again after" in proc.log_tail(100_000)
        assert _unready(never)
