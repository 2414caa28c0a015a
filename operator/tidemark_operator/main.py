"""Entry point of ``tidemark-operator``: options, kopf's settings (peering, where progress is kept),
the metrics server, and kopf's run (:func:`operate`)."""

from __future__ import annotations

import argparse
import asyncio
import itertools
import logging
import os
import secrets
from pathlib import Path
from typing import Any

import kopf

from tidemark.cli.options import bootstrap_list, conf_pair
from tidemark.errors import MissingExtraError
from tidemark.kafka_adapter import quiet_kafka_client_logs
from tidemark.kafka_security import KafkaSecurity
from tidemark.storage import S3Options, s3_storage_class
from tidemark_operator.handlers import OperatorConfig, Runtime, register
from tidemark_operator.jobs import DEFAULT_ACTIVE_DEADLINE_S
from tidemark_services.http import MonitoringServer
from tidemark_services.main import BOOTSTRAP_ENV, DEFAULT_BOOTSTRAP, add_monitoring_options
from tidemark_services.runtime import TIMELINE_TOPIC

# kopf's own waits between the attempts of a failing API request (about a minute in all)
KOPF_BACKOFFS_S = (1.0, 1.0, 2.0, 3.0, 5.0, 8.0, 13.0, 21.0)
KOPF_RETRY_S = sum(KOPF_BACKOFFS_S)


#: the longest --kube-retry: a day of retries (some 4,000 attempts) outlasts any API server outage
#: a restart would not cure better
MAX_KUBE_RETRY_S = 86_400.0


def _retry_seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds <= MAX_KUBE_RETRY_S:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a number of seconds above 0 and at most {MAX_KUBE_RETRY_S:g}"
        )
    return seconds


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of seconds above 0")
    return value


def backoffs_within(seconds: float) -> tuple[float, ...]:
    """kopf's waits between attempts (its longest repeated past its own), until they add up to
    ``seconds``, the last one shortened: an API server out of reach for that long makes kopf give up."""
    waits: list[float] = []
    left = seconds
    backoffs = itertools.chain(KOPF_BACKOFFS_S, itertools.repeat(KOPF_BACKOFFS_S[-1]))
    while left > 0:
        waits.append(min(next(backoffs), left))
        left -= waits[-1]
    return tuple(waits)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tidemark-operator",
        description="Schedules compaction, clean and archive of the Hudi tables named by HudiTable resources.",
    )
    env = os.environ.get
    parser.add_argument(
        "--bootstrap",
        type=bootstrap_list,
        default=env(BOOTSTRAP_ENV, DEFAULT_BOOTSTRAP),
        metavar="HOST:PORT[,HOST:PORT...]",
        help=f"the Kafka brokers the services' answers come from (default: ${BOOTSTRAP_ENV}, else {DEFAULT_BOOTSTRAP})",
    )
    parser.add_argument(
        "--topic",
        default=TIMELINE_TOPIC,
        help=f"the timeline events' topic, where requests go and answers come (default: {TIMELINE_TOPIC})",
    )
    parser.add_argument(
        "--group",
        default="tidemark-operator",
        help="prefix of the consumer group; each process adds its own suffix (default: tidemark-operator)",
    )
    add_monitoring_options(parser)
    parser.add_argument(
        "--s3-endpoint",
        metavar="URL",
        default=None,
        help="S3-compatible endpoint for s3:// tables' timelines (default: $TIDEMARK_S3_ENDPOINT, else AWS)",
    )
    parser.add_argument(
        "--s3-region",
        default=None,
        help="the S3 region (default: boto3's own lookup: $AWS_DEFAULT_REGION, ~/.aws/config)",
    )
    parser.add_argument(
        "--storage-timeout",
        type=_positive_int,
        default=5,
        help="seconds one storage request of a timeline read waits to connect, and then for an answer;"
        " each is tried 3 times, so an endpoint that never answers fails a read in about 3 times this"
        " (default: 5)",
    )
    parser.add_argument(
        "--read-threads",
        type=_positive_int,
        default=16,
        help="timeline reads at once: each table out of reach holds one while its read waits (default: 16)",
    )
    parser.add_argument(
        "--conf",
        action="append",
        default=[],
        type=conf_pair,
        metavar="KEY=VALUE",
        help="a tidemark.kafka.* client security setting (TLS, SASL); repeatable",
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--namespace", "-n", action="append", default=[], help="a namespace to watch (repeatable)")
    where.add_argument("--all-namespaces", "-A", action="store_true", help="watch every namespace")
    parser.add_argument(
        "--tick",
        type=float,
        default=10.0,
        help="seconds between two looks at each table; a fire time is requested when due, not at a look (default: 10)",
    )
    parser.add_argument(
        "--refresh", type=float, default=60.0, help="longest seconds between two timeline reads (default: 60)"
    )
    parser.add_argument(
        "--job-image",
        default=env("TIDEMARK_JOB_IMAGE", "tidemark:0.1.0"),
        help="the image of compaction Jobs (default: $TIDEMARK_JOB_IMAGE, else tidemark:0.1.0)",
    )
    parser.add_argument(
        "--job-service-account", default=None, help="the compaction Jobs' ServiceAccount (default: the namespace's)"
    )
    parser.add_argument(
        "--job-ttl", type=int, default=86400, help="seconds a finished compaction Job is kept (default: 86400)"
    )
    parser.add_argument(
        "--job-deadline",
        type=_positive_int,
        default=DEFAULT_ACTIVE_DEADLINE_S,
        help="seconds a compaction Job may run, or wait for its pod to start, before Kubernetes fails it"
        f" (its activeDeadlineSeconds; default: {DEFAULT_ACTIVE_DEADLINE_S})",
    )
    parser.add_argument(
        "--peering",
        default="tidemark-operator",
        help="kopf peering object shared by the replicas (default: tidemark-operator)",
    )
    parser.add_argument(
        "--peering-lifetime",
        type=int,
        default=60,
        help="seconds a silent peer counts as alive, its takeover time (default: 60)",
    )
    parser.add_argument("--standalone", action="store_true", help="no peering (one replica only)")
    parser.add_argument(
        "--peering-settle",
        type=float,
        default=3.0,
        help="seconds after start before the first request, while the replicas' peering records meet "
        "(default: 3; none with --standalone)",
    )
    parser.add_argument(
        "--kube-retry",
        type=_retry_seconds,
        default=KOPF_RETRY_S,
        metavar="SECONDS",
        help="how long a failing API request is retried before kopf gives up and /healthz fails "
        f"(default {KOPF_RETRY_S:g}, kopf's own)",
    )
    parser.add_argument(
        "--kube-server",
        default=None,
        help="the API server's URL (http://127.0.0.1:8001 of `kubectl proxy`); default: in-cluster, then kubeconfig",
    )
    parser.add_argument("--kube-token-file", default=None, help="with --kube-server: a bearer token's file")
    parser.add_argument("--kube-ca-file", default=None, help="with --kube-server: the API server's CA")
    parser.add_argument("--verbose", action="store_true", help="log at DEBUG, and every look at every table")
    return parser


class QuietLooks(logging.Filter):
    """Drops kopf's line for every successful look at every table ("Timer ... succeeded.", 100 a
    second at 1,000 tables and the default tick): what a look did that matters is logged by the
    operator itself, and a failed look still shows."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.INFO:
            return True
        message = record.getMessage()
        return not (message.startswith("Timer ") and message.endswith(" succeeded."))


def settings_for(args: argparse.Namespace) -> kopf.OperatorSettings:
    settings = kopf.OperatorSettings()
    # the status is the operator's own (its CRD prunes unknown fields): kopf keeps its progress and
    # the last handled spec in annotations
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="tidemark.io")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix="tidemark.io", key="last-handled-spec"
    )
    # Events for what goes wrong, not one per handler run (the operator posts its own Normal
    # Events with kopf.event, which this level does not filter)
    settings.posting.level = logging.WARNING
    # the namespaces and the resource are known: no listing of namespaces or CRDs (less RBAC)
    settings.scanning.disabled = True
    # a timer stopped (exiting, paused by peering) while it waits for a fire time returns at once;
    # give it a moment rather than ten event-loop cycles before kopf calls it orphaned
    settings.background.instant_exit_timeout = 0.5
    settings.peering.name = args.peering
    settings.peering.standalone = args.standalone
    settings.peering.clusterwide = bool(args.all_namespaces)
    settings.peering.lifetime = args.peering_lifetime
    # kopf pauses every operator of the same priority; a random one per process lets exactly one
    # replica (the highest) schedule, and another take over when it goes
    settings.peering.priority = secrets.randbelow(2**31 - 2) + 1
    settings.networking.error_backoffs = backoffs_within(args.kube_retry)
    return settings


async def operate(runtime: Runtime, **kwargs: Any) -> None:
    """What ``kopf.run`` does (``kopf.operator``), watching kopf's root tasks: they run as long as
    kopf orchestrates, so the first one to end means kopf has stopped (a signal, or it gave up,
    e.g. on an API server out of reach), whether or not the process then exits."""
    existing = asyncio.all_tasks()
    tasks = await kopf.spawn_tasks(**kwargs)
    for task in tasks:
        task.add_done_callback(runtime.kopf_ended)
    await kopf.run_tasks(tasks, ignored=existing)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        security = KafkaSecurity.from_conf(dict(args.conf))
        if args.s3_endpoint:  # told now, not when the first table's status is read
            s3_storage_class("--s3-endpoint")
    except (ValueError, MissingExtraError) as e:
        raise SystemExit(f"tidemark-operator: error: {e}") from None
    if not args.namespace and not args.all_namespaces:
        raise SystemExit("tidemark-operator: error: give --namespace NS (repeatable) or --all-namespaces")
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s operator %(levelname)s %(name)s %(message)s",
    )
    quiet_kafka_client_logs()
    if not args.verbose:
        logging.getLogger("kopf.objects").addFilter(QuietLooks())
    config = OperatorConfig(
        bootstrap=args.bootstrap,
        topic=args.topic,
        security=security,
        group=args.group,
        tick_s=args.tick,
        refresh_s=args.refresh,
        s3=S3Options(endpoint_url=args.s3_endpoint, region=args.s3_region, timeout_s=args.storage_timeout),
        read_threads=args.read_threads,
        job_image=args.job_image,
        job_service_account=args.job_service_account,
        job_ttl_s=args.job_ttl,
        job_deadline_s=args.job_deadline,
        settle_s=0.0 if args.standalone else args.peering_settle,
    )
    server, token_file, ca_file = args.kube_server, args.kube_token_file, args.kube_ca_file

    def explicit(kwargs: Any) -> kopf.ConnectionInfo:
        token = Path(token_file).read_text().strip() if token_file else None
        return kopf.ConnectionInfo(server=server, token=token, ca_path=ca_file, default_namespace="default")

    runtime = Runtime(config, explicit if args.kube_server else None)
    registry = kopf.OperatorRegistry()
    register(registry, runtime)
    monitoring = MonitoringServer(
        runtime.metrics.registry, runtime.healthy, port=args.metrics_port, host=args.metrics_host, ready=runtime.ready
    )
    logging.info(
        "scheduling HudiTables in %s; Kafka %s (%s); metrics on %s:%d",
        "every namespace" if args.all_namespaces else ", ".join(args.namespace),
        args.bootstrap,
        security.describe(),
        args.metrics_host,
        monitoring.port,
    )
    run = operate(
        runtime,
        registry=registry,
        settings=settings_for(args),
        clusterwide=bool(args.all_namespaces),
        namespaces=args.namespace,
        standalone=args.standalone,
    )
    try:
        asyncio.run(run)
    except asyncio.CancelledError:  # as kopf.run
        pass
    except Exception as e:  # kopf gave up (it logged why): a supervisor restarts what exits non-zero
        raise SystemExit(f"tidemark-operator: error: kopf stopped: {e}") from None
    finally:
        monitoring.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
