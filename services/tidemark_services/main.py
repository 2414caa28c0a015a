"""Command-line entry shared by the services: options, metrics server, signal handling."""

from __future__ import annotations

import argparse
import logging
import os
import signal
from collections.abc import Callable, Mapping

from tidemark.cli.options import conf_pair
from tidemark.config import redacted
from tidemark.events import EventType
from tidemark.kafka_security import KafkaSecurity
from tidemark.storage import S3Options
from tidemark_services.http import MonitoringServer
from tidemark_services.runtime import DEAD_LETTER_TOPIC, TIMELINE_TOPIC, EventService, Handler, ServiceMetrics

MakeHandler = Callable[[Mapping[str, str], S3Options, ServiceMetrics], Handler]


def build_parser(name: str) -> argparse.ArgumentParser:
    """The command line of service ``name``, built without starting anything (the deployment
    tests parse the Helm chart's and docker-compose's arguments with it)."""
    parser = argparse.ArgumentParser(prog=f"tidemark-{name}", description=f"tidemark {name} service")
    parser.add_argument("--bootstrap", default=os.environ.get("TIDEMARK_KAFKA_BOOTSTRAP", "127.0.0.1:9092"))
    parser.add_argument("--topic", default=TIMELINE_TOPIC)
    parser.add_argument("--group", default=None)
    parser.add_argument("--dead-letter-topic", default=DEAD_LETTER_TOPIC)
    parser.add_argument("--metrics-port", type=int, default=int(os.environ.get("TIDEMARK_METRICS_PORT", "9400")))
    parser.add_argument(
        "--metrics-host",
        default=os.environ.get("TIDEMARK_METRICS_HOST", "127.0.0.1"),
        help="address /metrics and /healthz listen on (0.0.0.0 in a container, for probes and scrapes)",
    )
    parser.add_argument("--s3-endpoint", default=None)
    parser.add_argument(
        "--conf",
        action="append",
        default=[],
        type=conf_pair,
        metavar="KEY=VALUE",
        help="a Hudi setting, or a tidemark.kafka.* client security setting (TLS, SASL); repeatable",
    )
    return parser


def kafka_security(prog: str, conf: Mapping[str, str]) -> KafkaSecurity:
    """The Kafka security settings of ``conf`` and the environment; bad ones end the process with
    a one-line ``<prog>: error: ...`` on stderr (exit status 1), not a traceback."""
    try:
        return KafkaSecurity.from_conf(conf)
    except ValueError as e:
        raise SystemExit(f"{prog}: error: {e}") from None


def log_settings(conf: Mapping[str, str]) -> None:
    """Log the ``--conf`` settings a service runs with, secret-looking values redacted: what an
    operator reads first when a service behaves unexpectedly."""
    shown = redacted(conf)
    logging.info("settings: %s", ", ".join(f"{k}={v}" for k, v in sorted(shown.items())) or "(defaults)")


def run_service(name: str, handles: frozenset[EventType], make_handler: MakeHandler, argv: list[str] | None) -> int:
    args = build_parser(name).parse_args(argv)
    security = kafka_security(f"tidemark-{name}", dict(args.conf))
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {name} %(levelname)s %(message)s")
    metrics = ServiceMetrics(name)
    handler = make_handler(dict(args.conf), S3Options(endpoint_url=args.s3_endpoint), metrics)
    service = EventService(
        name,
        args.bootstrap,
        handler,
        handles,
        metrics,
        topic=args.topic,
        group=args.group,
        dead_letter_topic=args.dead_letter_topic,
        security=security,
    )
    monitoring = MonitoringServer(metrics.registry, service.healthy, port=args.metrics_port, host=args.metrics_host)
    log_settings(dict(args.conf))
    logging.info(
        "consuming %s on %s (%s); metrics on %s:%d",
        args.topic,
        args.bootstrap,
        security.describe(),
        args.metrics_host,
        monitoring.port,
    )
    signal.signal(signal.SIGTERM, lambda *_: service.stop())
    try:
        service.run_forever()
    except KeyboardInterrupt:
        pass
    finally:
        service.close()
        monitoring.stop()
    return 0
