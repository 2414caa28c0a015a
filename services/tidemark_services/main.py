"""Command-line entry shared by the services: options, metrics server, the run until stopped."""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Callable, Mapping
from typing import TypeVar

from tidemark.cli.options import bootstrap_list, conf_pair, port_number
from tidemark.config import check_switches, redacted, unread_keys
from tidemark.errors import TidemarkError
from tidemark.events import EventType
from tidemark.kafka_adapter import quiet_kafka_client_logs
from tidemark.kafka_security import KafkaSecurity
from tidemark.storage import S3Options, s3_storage_class
from tidemark_services.http import MonitoringServer
from tidemark_services.runtime import (
    DEAD_LETTER_TOPIC,
    TIMELINE_TOPIC,
    EventService,
    Handler,
    ServiceMetrics,
    consumer_group,
)

T = TypeVar("T")
MakeHandler = Callable[[Mapping[str, str], S3Options, ServiceMetrics], Handler]

#: ``--triggers``: the service's own triggers (a clean after commits, an archival after each clean)
#: and ``*.requested`` commands, or the commands alone. An operator that schedules a table sends
#: that table's own settings with each request; the own triggers run with the service's ``--conf``
#: and would clean or archive the table by other rules than its HudiTable's.
TRIGGERS_OWN = "own"
TRIGGERS_REQUESTED = "requested"
#: the services that act on table events (the writer-coordinator answers writers instead)
_EVENT_SERVICES = frozenset({"cleaner", "archiver"})
#: the defaults of the options an environment variable may set, named in ``--help``
BOOTSTRAP_ENV = "TIDEMARK_KAFKA_BOOTSTRAP"
DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
METRICS_PORT_ENV = "TIDEMARK_METRICS_PORT"
DEFAULT_METRICS_PORT = "9400"
METRICS_HOST_ENV = "TIDEMARK_METRICS_HOST"
DEFAULT_METRICS_HOST = "127.0.0.1"
TRIGGERS_ENV = "TIDEMARK_SERVICE_TRIGGERS"


def add_monitoring_options(parser: argparse.ArgumentParser) -> None:
    """``--metrics-port`` and ``--metrics-host``: where /metrics and /healthz listen (the services'
    and the operator's alike)."""
    parser.add_argument(
        "--metrics-port",
        type=port_number,
        default=os.environ.get(METRICS_PORT_ENV, DEFAULT_METRICS_PORT),
        help=f"port of /metrics, /healthz and /readyz (default: ${METRICS_PORT_ENV}, else {DEFAULT_METRICS_PORT})",
    )
    parser.add_argument(
        "--metrics-host",
        default=os.environ.get(METRICS_HOST_ENV, DEFAULT_METRICS_HOST),
        help=f"address /metrics, /healthz and /readyz listen on (default: ${METRICS_HOST_ENV}, else "
        f"{DEFAULT_METRICS_HOST}; "
        "0.0.0.0 in a container, for probes and scrapes)",
    )


def build_parser(name: str) -> argparse.ArgumentParser:
    """The command line of service ``name``, built without starting anything (the deployment
    tests parse the Helm chart's and docker-compose's arguments with it)."""
    parser = argparse.ArgumentParser(prog=f"tidemark-{name}", description=f"tidemark {name} service")
    parser.add_argument(
        "--bootstrap",
        type=bootstrap_list,
        default=os.environ.get(BOOTSTRAP_ENV, DEFAULT_BOOTSTRAP),
        metavar="HOST:PORT[,HOST:PORT...]",
        help=f"the Kafka brokers (default: ${BOOTSTRAP_ENV}, else {DEFAULT_BOOTSTRAP})",
    )
    parser.add_argument(
        "--topic", default=TIMELINE_TOPIC, help=f"the timeline events' topic (default: {TIMELINE_TOPIC})"
    )
    parser.add_argument("--group", default=None, help=f"the Kafka consumer group (default: {consumer_group(name)})")
    parser.add_argument(
        "--dead-letter-topic",
        default=DEAD_LETTER_TOPIC,
        help=f"where events that cannot be read or handled go (default: {DEAD_LETTER_TOPIC})",
    )
    add_monitoring_options(parser)
    parser.add_argument(
        "--s3-endpoint",
        metavar="URL",
        default=None,
        help="S3-compatible endpoint for s3:// tables (default: $TIDEMARK_S3_ENDPOINT, else AWS)",
    )
    parser.add_argument(
        "--conf",
        action="append",
        default=[],
        type=conf_pair,
        metavar="KEY=VALUE",
        help="a Hudi setting, or a tidemark.kafka.* client security setting (TLS, SASL); repeatable",
    )
    if name in _EVENT_SERVICES:
        parser.add_argument(
            "--triggers",
            choices=[TRIGGERS_OWN, TRIGGERS_REQUESTED],
            default=os.environ.get(TRIGGERS_ENV, TRIGGERS_OWN),
            help=f"{TRIGGERS_OWN}: act on the table's events by the service's own triggers and on "
            f"*.requested commands; {TRIGGERS_REQUESTED}: on the commands alone (tables an operator "
            f"schedules, each with its own settings) (default: ${TRIGGERS_ENV}, else {TRIGGERS_OWN})",
        )
    return parser


def acted_on(handles: frozenset[EventType], triggers: str) -> frozenset[EventType]:
    """The event types a service acts on with ``--triggers``: all it handles, or its commands."""
    if triggers == TRIGGERS_OWN:
        return handles
    return frozenset(t for t in handles if t.value.endswith(".requested"))


def kafka_security(prog: str, conf: Mapping[str, str]) -> KafkaSecurity:
    """The Kafka security settings of ``conf`` and the environment; bad ones end the process with
    a one-line ``<prog>: error: ...`` on stderr (exit status 1), not a traceback."""
    try:
        return KafkaSecurity.from_conf(conf)
    except ValueError as e:
        raise SystemExit(f"{prog}: error: {e}") from None


def log_settings(conf: Mapping[str, str]) -> None:
    """Log the ``--conf`` settings a service runs with, secret-looking values redacted: what an
    operator reads first when a service behaves unexpectedly; a key nothing reads (misspelt,
    say, which would leave its setting at the default unseen) is warned about, as by the CLI."""
    shown = redacted(conf)
    logging.info("settings: %s", ", ".join(f"{k}={v}" for k, v in sorted(shown.items())) or "(defaults)")
    for key in unread_keys(conf):
        logging.warning("--conf %s: tidemark reads no such key; ignored", key)


def listening(prog: str, what: str, start: Callable[[], T]) -> T:
    """``start()`` of a server, a port already taken (or an address not this host's) ending the
    process with one line naming the flag."""
    try:
        return start()
    except OSError as e:
        raise SystemExit(f"{prog}: error: {what}: cannot listen there: {e.strerror or e}") from None


def run_service(name: str, handles: frozenset[EventType], make_handler: MakeHandler, argv: list[str] | None) -> int:
    args = build_parser(name).parse_args(argv)
    if args.triggers not in (TRIGGERS_OWN, TRIGGERS_REQUESTED):  # from the environment, unchecked by argparse
        raise SystemExit(
            f"tidemark-{name}: error: {TRIGGERS_ENV}={args.triggers!r}: expected {TRIGGERS_OWN} or {TRIGGERS_REQUESTED}"
        )
    handles = acted_on(handles, args.triggers)
    security = kafka_security(f"tidemark-{name}", dict(args.conf))
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {name} %(levelname)s %(message)s")
    quiet_kafka_client_logs()
    metrics = ServiceMetrics(name)
    try:
        check_switches(dict(args.conf))
        if args.s3_endpoint:  # told now, not at the first event for an s3:// table
            s3_storage_class("--s3-endpoint")
        handler = make_handler(dict(args.conf), S3Options(endpoint_url=args.s3_endpoint), metrics)
    except (TidemarkError, ValueError) as e:
        raise SystemExit(f"tidemark-{name}: error: {e}") from None
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
    monitoring = listening(
        f"tidemark-{name}",
        f"--metrics-port {args.metrics_port} on {args.metrics_host}",
        lambda: MonitoringServer(
            metrics.registry, service.healthy, port=args.metrics_port, host=args.metrics_host, ready=service.ready
        ),
    )
    log_settings(dict(args.conf))
    logging.info("acting on %s (--triggers %s)", ", ".join(sorted(t.value for t in handles)), args.triggers)
    logging.info(
        "consuming %s on %s (%s); metrics on %s:%d",
        args.topic,
        args.bootstrap,
        security.describe(),
        args.metrics_host,
        monitoring.port,
    )
    try:
        code = service.run_until_stopped()
    finally:
        service.close()
        monitoring.stop()
    logging.info("stopped")
    return code
