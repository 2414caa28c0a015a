"""The deployment files against the services they deploy: the Helm chart (charts/tidemark), the
docker-compose.yml and the Dockerfile.

Nothing here starts a container or a cluster (neither runs on these machines). Instead, what a
cluster or Docker would hand the services is checked against the services themselves: container
arguments are parsed by the services' own argparse parser, probes and scrapes are sent to a real
monitoring server, the alerts' metric names are looked up in a real metrics registry, and the
image's entrypoint is run as a shell would run it. The writer-coordinator is checked the same way,
with its own parser (it also serves a marker API on an http port) and its own metrics, and so is
the operator (on by default; its own part of the chart is in test_chart_operator.py).

Helm: a ``helm`` binary ($TIDEMARK_HELM, else on PATH) if there is one, else helm-python-sdk
(Helm's Go SDK through ctypes, in the dev extra); without either the chart tests skip."""

from __future__ import annotations

import argparse
import copy
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tidemark.config import unread_keys
from tidemark.events import SKIPPED_TYPES, EventType
from tidemark.storage import S3Options
from tidemark.table import concurrency
from tidemark.table.coordinator_client import COORDINATOR_URL_KEY, MARKERS_TYPE_KEY, coordinator_url
from tidemark_operator import main as operator_main
from tidemark_operator.handlers import OperatorMetrics
from tidemark_services import archiver, cleaner, coordinator_state, writer_coordinator
from tidemark_services.http import MonitoringServer
from tidemark_services.main import build_parser
from tidemark_services.runtime import ServiceMetrics
from tidemark_services.writer_coordinator import CoordinatorMetrics, CoordinatorSettings

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "tidemark"
COMPOSE = REPO / "docker-compose.yml"
DOCKERFILE = REPO / "Dockerfile"
COORDINATOR = "writer-coordinator"
#: the services run by tidemark_services.main, with their handlers
EVENT_SERVICES = {"cleaner": cleaner, "archiver": archiver}
#: every service the image runs and the chart deploys, with its key in values.yaml
VALUES_KEYS = {"cleaner": "cleaner", "archiver": "archiver", COORDINATOR: "writerCoordinator"}
SERVICES = tuple(VALUES_KEYS)
OPERATOR = "operator"
#: every Deployment the chart renders by default: the services and the operator
COMPONENTS = (*SERVICES, OPERATOR)
RELEASE, NAMESPACE = "tables", "lakehouse"
#: the settings the chart adds to a service's conf map itself
CHART_CONF_PREFIXES = ("tidemark.kafka.", "tidemark.writer.coordinator.")
LOOPBACK = {"127.0.0.1", "localhost", "::1"}

# every optional part of the chart switched on, most defaults replaced
FULL: dict[str, Any] = {
    "image": {"digest": "sha256:" + "0123456789abcdef" * 4},
    "imagePullSecrets": [{"name": "registry"}],
    "kafka": {
        "bootstrap": "broker-0.kafka:9093,broker-1.kafka:9093",
        "topic": "lake.timeline",
        "security": {
            "protocol": "SASL_SSL",
            "saslMechanism": "SCRAM-SHA-512",
            "saslUsername": "tidemark",
            "saslPasswordSecret": {"name": "kafka-tidemark", "key": "sasl-password"},
            "tlsSecret": {"name": "kafka-tidemark-tls", "clientCertificate": True},
        },
    },
    "s3": {
        "endpoint": "http://minio.storage:9000",
        "region": "eu-west-1",
        "credentials": {"existingSecret": "s3-keys"},
    },
    "metrics": {"port": 9500},
    "cleaner": {"group": "lake-cleaner", "conf": {"hoodie.cleaner.policy": "KEEP_LATEST_FILE_VERSIONS"}},
    "archiver": {"conf": {"hoodie.archive.beyond.savepoint": "true"}},
    # 9500 is taken by metrics.port above: the marker API moves
    "writerCoordinator": {
        "group": "lake-writers",
        "http": {"port": 9501},
        "conf": {
            "hoodie.markers.timeline_server_based.batch.interval_ms": "20",
            "hoodie.write.concurrency.async.conflict.detector.period_ms": "10000",
        },
        "serviceAccount": {"annotations": {"example.com/role": "coordinator"}},
        "tls": {"existingSecret": "coordinator-tls"},
        "networkPolicy": {"clientNamespaceSelector": {"tidemark.io/writers": "allowed"}},
    },
    "serviceAccount": {"annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/tidemark"}},
    "networkPolicy": {
        "metrics": {"podSelector": {"app.kubernetes.io/name": "prometheus"}},
        "egress": {
            "kafka": {"cidrs": ["10.20.0.0/16"]},
            "s3": {
                "peers": [
                    {
                        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "storage"}},
                        "podSelector": {"matchLabels": {"app": "minio"}},
                    }
                ]
            },
            # the instance metadata service, for an instance profile
            "extra": [
                {"to": [{"ipBlock": {"cidr": "169.254.169.254/32"}}], "ports": [{"port": 80, "protocol": "TCP"}]}
            ],
        },
    },
    "operator": {
        "replicas": 2,
        "namespaces": ["lake", "warehouse"],
        "tick": 5,
        "storageTimeout": 10,
        "readThreads": 32,
        "jobs": {"serviceAccountName": "compaction", "ttlSecondsAfterFinished": 3600, "activeDeadlineSeconds": 7200},
        "serviceAccount": {"annotations": {"example.com/role": "operator"}},
        # the API server's endpoints (`kubectl get endpoints kubernetes -n default`)
        "networkPolicy": {"apiServer": {"cidrs": ["172.20.0.1/32"], "ports": [443]}},
    },
    "serviceMonitor": {"enabled": True},
    "prometheusRule": {
        "enabled": True,
        "writeConflictsIn15m": 25,
        "writerCoordinatorDownFor": "10m",
        "operator": {"overdueSeconds": 1800, "pendingCompactions": 3},
    },
}


# --- helm ------------------------------------------------------------------------------------


class RenderError(Exception):
    """Helm refused to render the chart (a `fail` in a template, values.schema.json, ...)."""


class HelmBinary:
    def __init__(self, path: str) -> None:
        self.source = f"helm binary {path}"
        self.path = path

    def _values_file(self, values: Mapping[str, Any], tmp: Path) -> Path:
        file = tmp / "values.json"  # JSON is YAML
        file.write_text(json.dumps(values))
        return file

    def lint(self, values: Mapping[str, Any], tmp: Path) -> list[str]:
        cmd = [self.path, "lint", "--strict", str(CHART), "-f", str(self._values_file(values, tmp))]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
        return [] if done.returncode == 0 else [done.stdout + done.stderr]

    def template(self, values: Mapping[str, Any], tmp: Path) -> str:
        cmd = [self.path, "template", RELEASE, str(CHART), "--namespace", NAMESPACE]
        done = subprocess.run(
            [*cmd, "-f", str(self._values_file(values, tmp))], capture_output=True, text=True, timeout=60, check=False
        )
        if done.returncode != 0:
            raise RenderError(done.stderr)
        return done.stdout

    def notes(self, values: Mapping[str, Any], tmp: Path) -> str | None:
        return None  # `helm template` does not print NOTES.txt, and `helm install` wants a cluster


class HelmSdk:
    def __init__(self) -> None:
        import helm_python

        self.helm = helm_python
        self.source = f"helm-python-sdk {helm_python.__version__} (Helm {helm_python.helm_sdk_version()})"

    def lint(self, values: Mapping[str, Any], tmp: Path) -> list[str]:
        report = self.helm.lint(CHART, dict(values), strict=True)
        # severity 2 is a warning, 3 an error; --strict fails on both
        found = [f"{m['path']}: {m['error']}" for m in report["messages"] if m["severity"] >= 2]
        return [*report["errors"], *found]

    def _render(self, values: Mapping[str, Any]) -> dict[str, str]:
        try:
            with self.helm.Chart.load(CHART) as chart:
                rendered: dict[str, str] = chart.render(
                    dict(values), name=RELEASE, namespace=NAMESPACE, is_install=True
                )
        except (self.helm.HelmRenderError, self.helm.HelmValuesError) as e:  # a template's `fail`, the schema
            raise RenderError(str(e)) from None
        return rendered

    def template(self, values: Mapping[str, Any], tmp: Path) -> str:
        rendered = self._render(values)
        return "\n---\n".join(text for path, text in sorted(rendered.items()) if path.endswith((".yaml", ".yml")))

    def notes(self, values: Mapping[str, Any], tmp: Path) -> str | None:
        (text,) = [text for path, text in self._render(values).items() if path.endswith("/NOTES.txt")]
        return text


def find_helm() -> HelmBinary | HelmSdk | None:
    binary = os.environ.get("TIDEMARK_HELM") or shutil.which("helm")
    if binary:
        return HelmBinary(binary)
    try:
        return HelmSdk()
    except (ImportError, OSError):
        return None


HELM = find_helm()
needs_helm = pytest.mark.skipif(
    HELM is None,
    reason="no helm: install the dev extra (helm-python-sdk), or put a helm binary on PATH or in $TIDEMARK_HELM",
)


def merged(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def chart_values(override: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """values.yaml with ``override`` on top, as Helm merges them."""
    return merged(yaml.safe_load((CHART / "values.yaml").read_text()), override or {})


def render(override: Mapping[str, Any], tmp: Path) -> list[dict[str, Any]]:
    assert HELM is not None
    return [doc for doc in yaml.safe_load_all(HELM.template(override, tmp)) if doc]


def of_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def the_container(deployment: dict[str, Any]) -> dict[str, Any]:
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return container


def conf_text(value: object) -> str:
    """A conf value as the services should receive it."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def service_parser(name: str) -> argparse.ArgumentParser:
    """``tidemark-<name>``'s real parser: the writer-coordinator has its own."""
    return writer_coordinator.build_parser() if name == COORDINATOR else build_parser(name)


def service_metrics(name: str) -> ServiceMetrics:
    return CoordinatorMetrics(name) if name == COORDINATOR else ServiceMetrics(name)


def parse_container(container: Mapping[str, Any]) -> tuple[str, Any]:
    """The container's args as the image's entrypoint hands them on: the service name, then
    ``tidemark-<name>``'s own arguments, parsed by its real parser; the operator's container runs
    ``tidemark-operator`` itself, with its own parser."""
    if container.get("command") == ["tidemark-operator"]:
        return OPERATOR, operator_main.build_parser().parse_args([str(a) for a in container["args"]])
    name, *argv = container["args"]
    assert name in SERVICES, f"the first argument must name a service, not {name!r}"
    return name, service_parser(name).parse_args([str(a) for a in argv])


def named_port(container: Mapping[str, Any], port: int | str) -> int:
    if isinstance(port, int):
        return port
    (number,) = [p["containerPort"] for p in container["ports"] if p["name"] == port]
    return int(number)


def service_port(service: Mapping[str, Any], name: str) -> dict[str, Any]:
    (port,) = [p for p in service["spec"]["ports"] if p["name"] == name]
    return dict(port)


def component(doc: Mapping[str, Any]) -> str:
    return str(doc["metadata"]["labels"]["app.kubernetes.io/component"])


def the_coordinator(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (doc,) = [d for d in of_kind(docs, kind) if component(d) == COORDINATOR]
    return doc


def alert_rules(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    (rule,) = of_kind(docs, "PrometheusRule")
    return {r["alert"]: r for group in rule["spec"]["groups"] for r in group["rules"]}


# --- the chart -------------------------------------------------------------------------------


@needs_helm
@pytest.mark.parametrize("override", [{}, FULL], ids=["defaults", "everything-on"])
def test_helm_lint_passes(override: dict[str, Any], tmp_path: Path) -> None:
    assert HELM is not None
    assert HELM.lint(override, tmp_path) == [], HELM.source


@needs_helm
def test_template_renders_one_deployment_and_service_per_service(tmp_path: Path) -> None:
    docs = render({}, tmp_path)
    assert sorted(d["kind"] for d in docs) == [
        *["Deployment"] * 4,
        "KopfPeering",  # the operator's replicas agree through it (kopf does not create it)
        *["NetworkPolicy"] * 4,
        "Role",  # the operator's, in the release's namespace, and its binding
        "RoleBinding",
        "Secret",  # the writer-coordinator's API token
        *["Service"] * 4,
        *["ServiceAccount"] * 4,
    ]
    for kind in ("Deployment", "Service"):
        assert {d["metadata"]["name"] for d in of_kind(docs, kind)} == {f"{RELEASE}-tidemark-{s}" for s in COMPONENTS}
    assert {d["metadata"]["namespace"] for d in docs} == {NAMESPACE}

    full = render(FULL, tmp_path)
    assert len(of_kind(full, "ServiceMonitor")) == len(of_kind(full, "PrometheusRule")) == 1

    only_archiver = render(
        {"cleaner": {"enabled": False}, "writerCoordinator": {"enabled": False}, "operator": {"enabled": False}},
        tmp_path,
    )
    assert [the_container(d)["name"] for d in of_kind(only_archiver, "Deployment")] == ["archiver"]
    assert [s["metadata"]["name"] for s in of_kind(only_archiver, "Service")] == [f"{RELEASE}-tidemark-archiver"]


@needs_helm
@pytest.mark.parametrize("override", [{}, FULL], ids=["defaults", "everything-on"])
def test_deployment_args_parse_with_the_services_parser(override: dict[str, Any], tmp_path: Path) -> None:
    values = chart_values(override)
    deployments = of_kind(render(override, tmp_path), "Deployment")
    assert sorted(component(d) for d in deployments) == sorted(COMPONENTS)
    # the operator's arguments are its own (tests/deploy/test_chart_operator.py)
    for deployment in [d for d in deployments if component(d) != OPERATOR]:
        container = the_container(deployment)
        name, args = parse_container(container)
        own = values[VALUES_KEYS[name]]
        assert container["name"] == name
        assert deployment["spec"]["replicas"] == own["replicas"] == 1
        # the Hudi keys of values.yaml; the chart's own (Kafka security, the coordinator's token and
        # TLS files) are checked in test_chart_security.py
        hudi = {k: v for k, v in args.conf if not k.startswith(CHART_CONF_PREFIXES)}
        assert hudi == {k: conf_text(v) for k, v in own["conf"].items()}
        assert args.bootstrap == values["kafka"]["bootstrap"]
        assert args.topic == values["kafka"]["topic"]
        assert args.dead_letter_topic == values["kafka"]["deadLetterTopic"]
        assert args.group == (own["group"] or f"tidemark-{name}")
        assert args.s3_endpoint == (values["s3"]["endpoint"] or None)
        # probes and scrapes come from outside the pod: never only the loopback interface
        assert args.metrics_host not in LOOPBACK
        assert args.metrics_port == named_port(container, "metrics") == values["metrics"]["port"]
        strategy = deployment["spec"]["strategy"]
        if name == COORDINATOR:
            # Spark writers in other pods send markers: not only loopback either, on the port named http
            assert args.http_host not in LOOPBACK
            assert args.http_port == named_port(container, "http") == own["http"]["port"]
            assert args.http_port != args.metrics_port
            # the marker API stays up through a rollout: the new pod is ready before the old goes
            assert strategy == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
        else:
            # never an old and a new pod in the consumer group at once
            assert strategy["type"] == "Recreate"
            assert "http" not in {p["name"] for p in container["ports"]}


@needs_helm
def test_conf_numbers_and_booleans_reach_the_services_as_written(tmp_path: Path) -> None:
    conf = {"hoodie.cleaner.commits.retained": 1000000, "hoodie.cleaner.incremental.mode": False}
    override = {
        "cleaner": {"conf": conf},
        "archiver": {"enabled": False},
        "writerCoordinator": {"enabled": False},
        "operator": {"enabled": False},
    }
    (deployment,) = of_kind(render(override, tmp_path), "Deployment")
    _, args = parse_container(the_container(deployment))
    assert dict(args.conf) == {
        "hoodie.clean.max.commits": "1",
        "hoodie.cleaner.commits.retained": "1000000",  # not 1e+06
        "hoodie.cleaner.incremental.mode": "false",
        "hoodie.cleaner.policy": "KEEP_LATEST_COMMITS",
    }


@needs_helm
@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ({}, "requested"),  # the operator is on by default
        ({"operator": {"enabled": False}}, "own"),
        ({"cleaner": {"triggers": "own"}, "archiver": {"triggers": "own"}}, "own"),
    ],
    ids=["with-the-operator", "without-the-operator", "set"],
)
def test_services_act_on_the_operator_requests_alone_when_it_schedules_the_tables(
    override: dict[str, Any], expected: str, tmp_path: Path
) -> None:
    deployments = of_kind(render(override, tmp_path), "Deployment")
    parsed = dict(map(parse_container, map(the_container, deployments)))
    assert {name: parsed[name].triggers for name in EVENT_SERVICES} == dict.fromkeys(EVENT_SERVICES, expected)


@needs_helm
def test_notes_say_where_the_operator_schedules_tables_and_what_the_services_act_on(tmp_path: Path) -> None:
    assert HELM is not None
    notes = HELM.notes({"operator": {"namespaces": ["lake", "etl"]}}, tmp_path)
    if notes is None:
        pytest.skip(f"{HELM.source} does not render NOTES.txt")
    notes = " ".join(notes.split())
    assert "per HudiTable (kubectl get huditables, short name ht) in lake, etl." in notes
    assert "act on the operator's requests alone (--triggers requested)" in notes
    own = HELM.notes({"cleaner": {"triggers": "own"}, "archiver": {"triggers": "own"}}, tmp_path)
    assert own is not None
    assert f"in {NAMESPACE}." in own
    assert "--triggers requested" not in own
    without = HELM.notes({"operator": {"enabled": False}}, tmp_path)
    assert without is not None
    assert "HudiTable" not in without


@pytest.mark.parametrize("name", sorted(EVENT_SERVICES))
def test_values_conf_is_accepted_by_the_service(name: str) -> None:
    """The conf maps of values.yaml build the services' real configurations."""
    for override in ({}, FULL):
        conf = {k: conf_text(v) for k, v in chart_values(override)[name]["conf"].items()}
        handler = EVENT_SERVICES[name].make_handler(conf, S3Options(), ServiceMetrics(name))
        assert callable(handler)


def test_values_conf_is_accepted_by_the_writer_coordinator() -> None:
    """Its conf map builds its real settings, and every key is one it reads: a misspelt key would
    be ignored without a word."""
    known = {
        coordinator_state.BATCH_INTERVAL_KEY,
        coordinator_state.BATCH_THREADS_KEY,
        writer_coordinator.MAX_BODY_KEY,
        *(value for name, value in vars(concurrency).items() if name.endswith("_KEY")),
    }
    for override in ({}, FULL):
        conf = {k: conf_text(v) for k, v in chart_values(override)["writerCoordinator"]["conf"].items()}
        assert set(conf) <= known, sorted(set(conf) - known)
        # and the coordinator does not log them as keys tidemark reads not
        assert unread_keys(conf) == [], unread_keys(conf)
        settings = CoordinatorSettings.from_conf(conf)
        assert settings.batch_interval_ms == int(conf[coordinator_state.BATCH_INTERVAL_KEY])
    assert CoordinatorSettings.from_conf(chart_values()["writerCoordinator"]["conf"]).batch_interval_ms == 50


@needs_helm
def test_writer_coordinator_serves_its_marker_api_at_the_url_writers_are_given(tmp_path: Path) -> None:
    for override in ({}, FULL):
        docs = render(override, tmp_path)
        container = the_container(the_coordinator(docs, "Deployment"))
        _, args = parse_container(container)
        service = the_coordinator(docs, "Service")
        http = service_port(service, "http")
        assert named_port(container, http["targetPort"]) == args.http_port
        assert http["port"] == chart_values(override)["writerCoordinator"]["http"]["port"]
        assert http["protocol"] == "TCP"
        # the install notes tell writers the two settings; the writers' own parsing takes them
        assert HELM is not None
        notes = HELM.notes(override, tmp_path)
        if notes is None:
            continue
        conf = dict(re.findall(r"^\s*([a-z.]+)=(\S+)$", notes, re.MULTILINE))
        assert {MARKERS_TYPE_KEY, COORDINATOR_URL_KEY} <= conf.keys()
        assert conf[MARKERS_TYPE_KEY] == "TIMELINE_SERVER_BASED"
        url = coordinator_url(conf)
        # https once the marker API has a certificate
        scheme = "https" if chart_values(override)["writerCoordinator"]["tls"]["existingSecret"] else "http"
        assert url == f"{scheme}://{service['metadata']['name']}.{NAMESPACE}.svc:{http['port']}"


@needs_helm
def test_writer_coordinator_ports_must_differ(tmp_path: Path) -> None:
    """Both listen in its pod: the same number for both fails the render, not the pod."""
    with pytest.raises(RenderError, match=r"writerCoordinator\.http\.port and metrics\.port must differ"):
        render({"metrics": {"port": 9500}}, tmp_path)
    render({"metrics": {"port": 9500}, "writerCoordinator": {"enabled": False}}, tmp_path)


@needs_helm
def test_object_names_fit_in_a_dns_label(tmp_path: Path) -> None:
    """Service names are DNS labels (63 characters), also with the longest suffix, -writer-coordinator."""
    label = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
    for override in ({"fullnameOverride": "a" * 70}, {"nameOverride": "b" * 70}):
        docs = render(merged(FULL, override), tmp_path)
        names = [d["metadata"]["name"] for d in docs]
        assert all(label.fullmatch(name) for name in names), names
        assert the_coordinator(docs, "Service")["metadata"]["name"].endswith(f"-{COORDINATOR}")


@needs_helm
def test_s3_credentials_come_from_the_existing_secret(tmp_path: Path) -> None:
    for deployment in of_kind(render(FULL, tmp_path), "Deployment"):
        env = {e["name"]: e for e in the_container(deployment)["env"]}
        if component(deployment) == OPERATOR:
            # the operator has an option for it (and passes it to the tables it reads)
            assert parse_container(the_container(deployment))[1].s3_region == "eu-west-1"
        else:
            assert env["AWS_REGION"]["value"] == "eu-west-1"
        for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            assert env[var]["valueFrom"]["secretKeyRef"] == {"name": "s3-keys", "key": var}
    for deployment in of_kind(render({}, tmp_path), "Deployment"):
        assert "env" not in the_container(deployment)  # boto3 finds credentials itself (IRSA, ...)


@pytest.fixture
def monitoring() -> Iterator[tuple[int, list[bool]]]:
    """A real monitoring server on loopback; flip ``state[0]`` to make it unhealthy."""
    state = [True]
    metrics = ServiceMetrics("cleaner")
    server = MonitoringServer(metrics.registry, lambda: (state[0], "ok\n" if state[0] else "failing\n"), port=0)
    try:
        yield server.port, state
    finally:
        server.stop()


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


@needs_helm
def test_probes_and_scrapes_reach_what_the_service_serves(monitoring: tuple[int, list[bool]], tmp_path: Path) -> None:
    port, state = monitoring
    docs = render(FULL, tmp_path)
    paths = set()
    for deployment in of_kind(docs, "Deployment"):
        container = the_container(deployment)
        _, args = parse_container(container)
        for probe in ("livenessProbe", "readinessProbe"):
            # the writer-coordinator's too: /healthz is on the metrics port, not the marker API's
            http = container[probe]["httpGet"]
            assert named_port(container, http["port"]) == args.metrics_port
            paths.add(http["path"])
        # Kafka refusing TLS or SASL, or out of reach, fails /readyz only: liveness must not restart
        # a pod for what no restart fixes (tests/services/test_kafka_security.py, test_broker_outage.py)
        assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
        assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    # the probe path is the health check: 200 while healthy, 503 once a run failed
    # liveness asks /healthz, readiness /readyz (the writer-coordinator's stays ready while Kafka
    # fails: tests/services/test_kafka_security.py); a cleaner's two answer alike
    assert paths == {"/healthz", "/readyz"}
    for path in paths:
        state[0] = True
        assert get(port, path) == (200, "ok\n")
        state[0] = False
        assert get(port, path) == (503, "failing\n")

    services = of_kind(docs, "Service")
    assert {component(s) for s in services} == set(COMPONENTS)
    for service in services:
        metrics = service_port(service, "metrics")
        assert metrics["targetPort"] == "metrics"
        assert metrics["port"] == FULL["metrics"]["port"]
        # the writer-coordinator's Service also has its marker API; no other port anywhere
        extra = {"http"} if component(service) == COORDINATOR else set()
        assert {p["name"] for p in service["spec"]["ports"]} == {"metrics", *extra}
    (monitor,) = of_kind(docs, "ServiceMonitor")
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == "metrics"
    for service in services:  # the ServiceMonitor selects every Service
        assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    status, text = get(port, endpoint["path"])
    assert status == 200
    assert "tidemark_seconds_since_last_success" in text


def exposed_names(registry: CollectorRegistry) -> set[str]:
    """The series names a registry exposes, whether or not a labelled metric has a child yet."""
    suffixes = {
        "counter": ("_total", "_created"),
        "gauge": ("",),
        "histogram": ("_bucket", "_sum", "_count", "_created"),
        "summary": ("", "_sum", "_count", "_created"),
    }
    return {family.name + s for family in registry.collect() for s in suffixes[family.type]}


COORDINATOR_ALERTS = {
    "TidemarkWriteConflictSpike",
    "TidemarkWritersFallingBackToDirectMarkers",
    "TidemarkWriterCoordinatorDown",
}
OPERATOR_ALERTS = {
    "TidemarkHudiTableServiceOverdue",
    "TidemarkHudiTableArchivalBlocked",
    "TidemarkHudiTableCompactionBacklog",
    "TidemarkHudiTableDegraded",
    "TidemarkOperatorDown",
}
#: the alerts on Prometheus's own `up` of a component's scrape targets
DOWN_ALERTS = {"TidemarkWriterCoordinatorDown", "TidemarkOperatorDown"}


@needs_helm
def test_alerts_name_metrics_the_services_expose(tmp_path: Path) -> None:
    rules = alert_rules(render(FULL, tmp_path))
    assert set(rules) == {
        "TidemarkServiceNoRecentSuccess",
        "TidemarkServiceRunsFailing",
        "TidemarkEventsDeadLettered",
        "TidemarkEventsSkipped",
        "TidemarkAnnouncementsUnpublished",
        "TidemarkArchivalBlocked",
        *COORDINATOR_ALERTS,
        *OPERATOR_ALERTS,
    }
    exposed = {name: exposed_names(service_metrics(name).registry) for name in SERVICES}
    exposed[OPERATOR] = exposed_names(OperatorMetrics().registry)
    for r in rules.values():
        # every name in the expression; in the annotations, the series they point the reader to
        used = set(re.findall(r"\btidemark_[a-z0-9_]+", r["expr"]))
        used |= set(re.findall(r"\b(tidemark_[a-z0-9_]+)\{", json.dumps(r["annotations"])))
        used |= set(re.findall(r"\b(tidemark_[a-z0-9_]+_total)\b", json.dumps(r["annotations"])))
        if r["alert"] in DOWN_ALERTS:
            assert not used  # Prometheus's own `up`: see the writer-coordinator's test below
            continue
        assert used, r["alert"]
        # the series an alert counts all come from one kind of component (the annotations may
        # point the reader to another's too)
        counted = set(re.findall(r"\btidemark_[a-z0-9_]+", r["expr"]))
        owners = [name for name in exposed if counted <= exposed[name]]
        every = set().union(*exposed.values())
        assert owners, f"{r['alert']} counts metrics no component exposes: {sorted(counted - every)}"
        assert used <= every, f"{r['alert']} names metrics nothing exposes: {sorted(used - every)}"
        # the series are selected by the job the ServiceMonitor gives them: the names of the
        # Services of the components that expose them
        jobs = set(re.findall(r'job=~?"([^"]+)"', r["expr"]))
        assert jobs, r["expr"]
        for job in jobs:
            assert all(re.fullmatch(job, f"{RELEASE}-tidemark-{name}") for name in owners), (job, owners)
        assert f'namespace="{NAMESPACE}"' in r["expr"]
    # without the operator, no alert on it
    without = alert_rules(render(merged(FULL, {"operator": {"enabled": False}}), tmp_path))
    assert not set(without) & OPERATOR_ALERTS


@needs_helm
def test_the_runs_failing_alert_counts_outcomes_every_service_exposes_from_its_start(tmp_path: Path) -> None:
    """increase() counts a restarted pod's first failure only if its series was there, at 0,
    before it: every service exposes each outcome the alert counts as soon as it starts."""
    expr = alert_rules(render(FULL, tmp_path))["TidemarkServiceRunsFailing"]["expr"]
    counted = {o for matcher in re.findall(r'outcome=~?"([^"]+)"', expr) for o in matcher.split("|")}
    assert counted == {"error", "ok", "nothing-to-do"}, expr
    for name in SERVICES:
        registry = service_metrics(name).registry
        for outcome in counted:
            labels = {"service": name, "outcome": outcome}
            assert registry.get_sample_value("tidemark_service_runs_total", labels) == 0, labels


@needs_helm
def test_the_unpublished_alert_names_every_event_the_services_queue(tmp_path: Path) -> None:
    """What waits for the broker: the cleaner's and the archiver's answers, the skips too."""
    described = alert_rules(render(FULL, tmp_path))["TidemarkAnnouncementsUnpublished"]["annotations"]["description"]
    for type_ in (EventType.CLEAN_COMPLETED, EventType.ARCHIVE_COMPLETED, *sorted(SKIPPED_TYPES)):
        assert str(type_).removeprefix("tidemark.") in described, type_


@needs_helm
@pytest.mark.parametrize("override", [{}, FULL], ids=["defaults", "everything-on"])
def test_writer_coordinator_alerts_count_its_series_by_table(override: dict[str, Any], tmp_path: Path) -> None:
    """The conflict and fallback alerts against what a real CoordinatorMetrics exposes: the
    series' names and the labels the alerts sum by."""
    rules = alert_rules(render(merged(override, {"prometheusRule": {"enabled": True}}), tmp_path))
    metrics = CoordinatorMetrics(COORDINATOR)
    # one series of each kind the alerts count; labelled by keyword, so a renamed label fails here
    table = "s3://tidemark/orders"
    metrics.conflicts.labels(table=table, stage="early").inc()
    metrics.conflicts.labels(table=table, stage="commit").inc()
    metrics.fallbacks.labels(table=table).inc()
    series: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(generate_latest(metrics.registry).decode()):
        for sample in family.samples:
            series.setdefault(sample.name, set()).update(sample.labels)
    threshold = chart_values(override)["prometheusRule"]["writeConflictsIn15m"]
    expected = {
        "TidemarkWriteConflictSpike": ("tidemark_coordinator_conflicts_total", f"> {threshold}"),
        "TidemarkWritersFallingBackToDirectMarkers": ("tidemark_coordinator_fallbacks_total", "> 0"),
    }
    for alert, (name, comparison) in expected.items():
        expr = rules[alert]["expr"]
        assert set(re.findall(r"\btidemark_[a-z0-9_]+", expr)) == {name}
        assert name in series, f"{name} is not in the writer-coordinator's exposition"
        assert re.search(rf"increase\({name}\{{[^}}]*\}}\[15m\]\)", expr), expr
        assert expr.rstrip().endswith(comparison), expr
        # a series per table; namespace is the scrape's label, not the service's
        (by,) = re.findall(r"\bby \(([^)]*)\)", expr)
        grouped = {label.strip() for label in by.split(",")}
        assert "table" in grouped
        assert grouped - {"namespace"} <= series[name], (grouped, series[name])
        assert "table" in json.dumps(rules[alert]["annotations"])
    assert series["tidemark_coordinator_conflicts_total"] >= {"table", "stage"}


@needs_helm
@pytest.mark.parametrize("override", [{}, FULL], ids=["defaults", "everything-on"])
def test_writer_coordinator_down_alert_watches_its_scrape_targets(override: dict[str, Any], tmp_path: Path) -> None:
    """Down: no target of its job answers (`up` is 0) or none is scraped at all (`absent`)."""
    values = chart_values(override)
    docs = render(merged(override, {"prometheusRule": {"enabled": True}}), tmp_path)
    rule = alert_rules(docs)["TidemarkWriterCoordinatorDown"]
    # the job the ServiceMonitor gives its series: its Service's name
    job = the_coordinator(docs, "Service")["metadata"]["name"]
    selectors = re.findall(r"\bup\{([^}]*)\}", rule["expr"])
    assert selectors == [f'namespace="{NAMESPACE}", job="{job}"'] * 2
    assert re.fullmatch(r"max by \(namespace, job\) \(up\{[^}]*\}\) == 0\s+or\s+absent\(up\{[^}]*\}\)", rule["expr"])
    assert rule["for"] == values["prometheusRule"]["writerCoordinatorDownFor"]

    # without the writer-coordinator, no alert on it either
    without = render(
        merged(override, {"prometheusRule": {"enabled": True}, "writerCoordinator": {"enabled": False}}), tmp_path
    )
    assert not set(alert_rules(without)) & COORDINATOR_ALERTS


# --- docker-compose.yml ----------------------------------------------------------------------


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return loaded


def listeners(spec: str) -> dict[str, tuple[str, int]]:
    """``NAME://host:port,...`` as {name: (host, port)}."""
    out = {}
    for item in spec.split(","):
        name, _, address = item.partition("://")
        host, _, port = address.rpartition(":")
        out[name] = (host, int(port))
    return out


def test_compose_services_parse_with_the_services_parser() -> None:
    services = compose()["services"]
    minio = services["minio"]["environment"]
    ports_seen = []
    for name in SERVICES:
        service = services[name]
        assert service["build"] == "."
        assert DOCKERFILE.exists()
        command = [str(a) for a in service["command"]]
        assert command[0] == name
        args = service_parser(name).parse_args(command[1:])
        assert args.bootstrap == "kafka:9092"
        assert args.s3_endpoint == "http://minio:9000"
        assert args.metrics_host not in LOOPBACK
        assert dict(args.conf), "each service gets its Hudi keys"
        env = service["environment"]
        assert env["AWS_ACCESS_KEY_ID"] == minio["MINIO_ROOT_USER"]
        assert env["AWS_SECRET_ACCESS_KEY"] == minio["MINIO_ROOT_PASSWORD"]
        # the metrics port is published and the health check asks /healthz on it
        assert f"{args.metrics_port}:{args.metrics_port}" in service["ports"]
        ports_seen.append(args.metrics_port)
        (url,) = re.findall(r"http://[^'\"]+", " ".join(service["healthcheck"]["test"]))
        assert url == f"http://127.0.0.1:{args.metrics_port}/healthz"
        assert {"kafka", "minio"} <= set(service["depends_on"])
        if name == COORDINATOR:
            # writers on the host reach the marker API on the same port
            assert args.http_host not in LOOPBACK
            assert f"{args.http_port}:{args.http_port}" in service["ports"]
            ports_seen.append(args.http_port)
    # every service's ports are published on the host: no two the same
    assert len(set(ports_seen)) == len(ports_seen) == len(SERVICES) + 1


def test_compose_kafka_is_reachable_from_the_network_and_the_host() -> None:
    env = compose()["services"]["kafka"]["environment"]
    bound = listeners(env["KAFKA_LISTENERS"])
    advertised = listeners(env["KAFKA_ADVERTISED_LISTENERS"])
    protocols = dict(item.split(":") for item in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
    assert set(bound) <= set(protocols)
    # containers bootstrap from kafka:9092 and must be told kafka:9092 again, not localhost
    (internal,) = [n for n, address in advertised.items() if address == ("kafka", 9092)]
    assert bound[internal][1] == 9092
    # the host reaches localhost:9092 (the services' default bootstrap) through a published port
    (external,) = [n for n, address in advertised.items() if address == ("localhost", 9092)]
    assert f"9092:{bound[external][1]}" in compose()["services"]["kafka"]["ports"]
    assert env["KAFKA_INTER_BROKER_LISTENER_NAME"] == internal


# --- the Dockerfile --------------------------------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]


def test_dockerfile_installs_the_services_without_dev_extras_as_non_root() -> None:
    instructions = dockerfile_instructions()
    assert instructions[0] == ("FROM", "python:3.11-slim")
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    (install,) = [arg for kind, arg in instructions if kind == "RUN" and "pip install" in arg]
    (extras,) = re.findall(r"\[([a-z0-9,]+)\]", install)
    assert set(extras.split(",")) <= set(project["optional-dependencies"]) - {"dev"}
    (user,) = [arg for kind, arg in instructions if kind == "USER"]
    assert user.split(":")[0] not in {"0", "root"}
    # the build context lets in what COPY takes
    allowed = {line.strip("!/ ") for line in (REPO / ".dockerignore").read_text().splitlines() if line.startswith("!")}
    for kind, arg in instructions:
        if kind == "COPY":
            assert set(arg.split()[:-1]) <= allowed, arg


def test_dockerfile_listens_outside_the_container_on_the_exposed_ports(monkeypatch: pytest.MonkeyPatch) -> None:
    """The image's ENV make the services listen on every interface by default (probes, scrapes
    and writers come from outside the container), on ports it EXPOSEs."""
    instructions = dockerfile_instructions()
    for kind, arg in instructions:
        if kind == "ENV":
            for pair in shlex.split(arg):
                key, _, value = pair.partition("=")
                monkeypatch.setenv(key, value)
    for variable in ("TIDEMARK_METRICS_PORT", "TIDEMARK_COORDINATOR_PORT"):
        monkeypatch.delenv(variable, raising=False)
    exposed = {int(port) for kind, arg in instructions if kind == "EXPOSE" for port in arg.split()}
    for name in SERVICES:
        args = service_parser(name).parse_args([])  # the defaults are read when the parser is built
        assert args.metrics_host not in LOOPBACK
        assert args.metrics_port in exposed
    args = service_parser(COORDINATOR).parse_args([])
    assert args.http_host not in LOOPBACK
    assert args.http_port in exposed


def test_dockerfile_entrypoint_runs_the_named_service() -> None:
    (entrypoint,) = [json.loads(arg) for kind, arg in dockerfile_instructions() if kind == "ENTRYPOINT"]
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    for name in SERVICES:
        assert f"tidemark-{name}" in scripts
        done = subprocess.run(
            [*entrypoint, name, "--help"], capture_output=True, text=True, env=env, timeout=60, check=False
        )
        assert done.returncode == 0, done.stderr
        assert f"usage: tidemark-{name}" in done.stdout
        assert "--metrics-host" in done.stdout
        if name == COORDINATOR:
            assert "--http-host" in done.stdout
    done = subprocess.run([*entrypoint, "compactor"], capture_output=True, text=True, env=env, timeout=60, check=False)
    assert done.returncode == 64
    assert f"usage: {'|'.join([*SERVICES, 'operator'])}" in done.stderr
    done = subprocess.run([*entrypoint, "operator", "--help"], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "usage: tidemark-operator" in done.stdout
