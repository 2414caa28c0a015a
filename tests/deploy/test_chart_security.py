"""The chart's hardening, checked the way an operator of a cluster would check it: the rendered
manifests scanned by checkov and validated against Kubernetes' own schemas, every pod locked down,
each service with its own ServiceAccount and no RBAC but the operator's, NetworkPolicies that let
in and out only what the services need (judged by evaluating them against pods and addresses), and secrets that
reach the services only as files of mounted Secrets. For the last, the Secret volumes are
"mounted" into a temporary directory as the kubelet would lay them out, and the services' own
settings parsers read the files the rendered ``--conf`` names. bandit scans the Python code.

checkov runs from its own venv (.venv/checkov, see the Makefile), $TIDEMARK_CHECKOV or PATH;
bandit from the project's venv; without them those tests skip and say why."""

from __future__ import annotations

import base64
import ipaddress
import json
import os
import re
import shutil
import string
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_validate import utils as kubernetes_schemas

from tests.deploy.test_chart import (
    CHART,
    COMPONENTS,
    COORDINATOR,
    FULL,
    HELM,
    NAMESPACE,
    OPERATOR,
    RELEASE,
    REPO,
    RenderError,
    chart_values,
    component,
    dockerfile_instructions,
    merged,
    needs_helm,
    of_kind,
    parse_container,
    render,
    the_container,
    the_coordinator,
)
from tests.support.tls_proxy import issue, make_ca
from tidemark.config import is_secret_key
from tidemark.kafka_security import KafkaSecurity
from tidemark.table.coordinator_client import TOKEN_FILE_KEY, read_token_file
from tidemark_services.writer_coordinator import ApiSecurity

#: Amazon MSK with IAM (no password, no CA Secret) and a token Secret the operator manages
MSK_IAM: dict[str, Any] = merged(
    FULL,
    {
        "kafka": {
            "security": {
                "saslMechanism": "OAUTHBEARER",
                "oauthbearerMethod": "aws_msk_iam",
                "saslUsername": "",
                "saslPasswordSecret": {"name": ""},
                "tlsSecret": {"name": "", "clientCertificate": False},
            }
        },
        "writerCoordinator": {"auth": {"existingSecret": "writers-token", "existingSecretKey": "api-token"}},
    },
)
VARIANTS = {"defaults": {}, "everything-on": FULL, "msk-iam": MSK_IAM}
variants = pytest.mark.parametrize("override", list(VARIANTS.values()), ids=list(VARIANTS))

SECRETS_ROOT = "/var/run/secrets/tidemark/"
#: where the operator's container (and no other) gets its Kubernetes API token
KUBE_TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
#: where the settings contract puts each secret file in the pod
TOKEN_FILE = "/var/run/secrets/tidemark/coordinator/token/token"
SASL_PASSWORD_FILE = "/var/run/secrets/tidemark/kafka/sasl/password"
KAFKA_CA_FILE = "/var/run/secrets/tidemark/kafka/tls/ca.crt"
POD_UID = 10001


def containers(deployment: Mapping[str, Any]) -> list[dict[str, Any]]:
    spec = deployment["spec"]["template"]["spec"]
    return [*spec.get("initContainers", []), *spec["containers"]]


def pod_spec(deployment: Mapping[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = deployment["spec"]["template"]["spec"]
    return spec


def conf_of(container: Mapping[str, Any]) -> dict[str, str]:
    return dict(parse_container(container)[1].conf)


def render_text(override: Mapping[str, Any], tmp: Path) -> str:
    assert HELM is not None
    return HELM.template(override, tmp)


def the_token(docs: list[dict[str, Any]]) -> str:
    (secret,) = of_kind(docs, "Secret")
    return base64.b64decode(secret["data"]["token"]).decode()


def token_secret(deployment: Mapping[str, Any]) -> str:
    """The Secret the writer-coordinator's token volume mounts."""
    (volume,) = [v for v in pod_spec(deployment)["volumes"] if v["name"] == "coordinator-token"]
    return str(volume["secret"]["secretName"])


# --- every pod locked down -------------------------------------------------------------------


@needs_helm
@variants
def test_every_pod_runs_unprivileged_with_a_read_only_root(override: dict[str, Any], tmp_path: Path) -> None:
    docs = render(override, tmp_path)
    # the chart's only pods are the Deployments' (no Job, no test pod)
    assert {d["kind"] for d in docs} & {"Pod", "Job", "CronJob", "DaemonSet", "StatefulSet"} == set()
    deployments = of_kind(docs, "Deployment")
    assert {component(d) for d in deployments} == set(COMPONENTS)
    (user,) = [arg for kind, arg in dockerfile_instructions() if kind == "USER"]
    for deployment in deployments:
        spec = pod_spec(deployment)
        pod = spec["securityContext"]
        # the image's own user (Dockerfile USER), fixed, not root; Secret files group-owned by it
        assert f"{pod['runAsUser']}:{pod['runAsGroup']}" == user == f"{POD_UID}:{POD_UID}"
        assert pod["runAsNonRoot"] is True
        assert pod["fsGroup"] == POD_UID
        assert pod["seccompProfile"] == {"type": "RuntimeDefault"}
        assert spec["automountServiceAccountToken"] is False
        assert spec["enableServiceLinks"] is False
        assert not spec.get("hostNetwork")
        assert not spec.get("hostPID")
        assert not spec.get("hostIPC")
        volumes = {v["name"]: v for v in spec["volumes"]}
        for container in containers(deployment):
            security = container["securityContext"]
            assert security["allowPrivilegeEscalation"] is False
            assert security["readOnlyRootFilesystem"] is True
            assert security["privileged"] is False
            assert security["capabilities"] == {"drop": ["ALL"]}
            assert security.get("runAsUser", POD_UID) != 0
            resources = container["resources"]
            for kind in ("requests", "limits"):
                assert set(resources[kind]) >= {"cpu", "memory"}, (component(deployment), kind)
            assert container["livenessProbe"]
            assert container["readinessProbe"]
            # the one writable place is /tmp, an emptyDir of bounded size; Secrets are read-only
            mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
            assert volumes[mounts["/tmp"]["name"]]["emptyDir"]["sizeLimit"]
            for path, mount in mounts.items():
                volume = volumes[mount["name"]]
                if component(deployment) == OPERATOR and path == KUBE_TOKEN_DIR:
                    # the API token the operator needs, mounted into its container alone, read-only,
                    # and short-lived (the kubelet renews it)
                    assert mount["readOnly"] is True
                    assert volume["projected"]["defaultMode"] == 0o440
                    (token,) = [s for s in volume["projected"]["sources"] if "serviceAccountToken" in s]
                    assert token["serviceAccountToken"]["expirationSeconds"] <= 3607
                    continue
                assert set(volume) & {"emptyDir", "secret"}, f"{path}: only emptyDir and Secret volumes"
                if "secret" in volume:
                    assert mount["readOnly"] is True, path
                    assert path.startswith(SECRETS_ROOT), path
                    # owner and the pod's group may read, no one may write
                    assert volume["secret"]["defaultMode"] == 0o440, path


@needs_helm
def test_image_by_digest(tmp_path: Path) -> None:
    digest = FULL["image"]["digest"]
    for deployment in of_kind(render(FULL, tmp_path), "Deployment"):
        assert the_container(deployment)["image"] == f"tidemark@{digest}"
    with pytest.raises(RenderError, match=r"image\.digest must be sha256:<64 hex digits>, not \"latest\""):
        render({"image": {"digest": "latest"}}, tmp_path)


# --- ServiceAccounts and RBAC ----------------------------------------------------------------


@needs_helm
@variants
def test_each_service_has_its_own_service_account_and_only_the_operator_rbac(
    override: dict[str, Any], tmp_path: Path
) -> None:
    values = chart_values(override)
    docs = render(override, tmp_path)
    accounts = {a["metadata"]["name"]: a for a in of_kind(docs, "ServiceAccount")}
    used = {component(d): pod_spec(d)["serviceAccountName"] for d in of_kind(docs, "Deployment")}
    assert len(set(used.values())) == len(COMPONENTS), used
    assert set(accounts) == set(used.values())
    # the services never call the Kubernetes API: every binding is the operator's, to its own account
    bindings = [d for d in docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding")]
    assert bindings
    for binding in bindings:
        assert component(binding) == OPERATOR
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": used[OPERATOR], "namespace": NAMESPACE}]
    assert all(component(r) == OPERATOR for r in docs if r["kind"] in ("Role", "ClusterRole"))
    for service, name in used.items():
        account = accounts[name]
        assert component(account) == service
        assert account["automountServiceAccountToken"] is False
        own = values[{"writer-coordinator": "writerCoordinator"}.get(service, service)]["serviceAccount"]
        # IRSA's role on every one, the service's own on top
        expected = {**values["serviceAccount"]["annotations"], **own["annotations"]}
        assert account["metadata"].get("annotations", {}) == expected


@needs_helm
def test_existing_service_accounts(tmp_path: Path) -> None:
    existing = {
        "serviceAccount": {"create": False},
        "archiver": {"serviceAccount": {"name": "archival"}},
        "operator": {"serviceAccount": {"name": "scheduler"}},
    }
    docs = render(existing, tmp_path)
    assert of_kind(docs, "ServiceAccount") == []
    used = {component(d): pod_spec(d)["serviceAccountName"] for d in of_kind(docs, "Deployment")}
    assert used == {"cleaner": "default", "archiver": "archival", COORDINATOR: "default", OPERATOR: "scheduler"}
    (binding,) = of_kind(docs, "RoleBinding")
    assert [s["name"] for s in binding["subjects"]] == ["scheduler"]
    # the operator's Role bound to `default` would be granted to every pod running as it: refused
    with pytest.raises(RenderError, match=r"operator\.serviceAccount\.name must be set when serviceAccount\.create"):
        render({"serviceAccount": {"create": False}}, tmp_path)
    # the old single name would put every service under one account: refused, saying what replaces it
    with pytest.raises(RenderError, match=r"serviceAccount\.name is replaced by <service>\.serviceAccount\.name"):
        render({"serviceAccount": {"name": "tidemark"}}, tmp_path)


# --- secrets: referenced, mounted as files, never inlined --------------------------------------


@needs_helm
@variants
def test_no_secret_value_is_inlined(override: dict[str, Any], tmp_path: Path) -> None:
    text = render_text(override, tmp_path)
    docs = [d for d in yaml.safe_load_all(text) if d]
    values = chart_values(override)
    secrets = of_kind(docs, "Secret")
    # the chart makes one Secret, the coordinator's token, and only when none is given
    generated = not values["writerCoordinator"]["auth"]["existingSecret"]
    assert [s["metadata"]["name"] for s in secrets] == ([f"{RELEASE}-tidemark-coordinator-token"] if generated else [])
    for deployment in of_kind(docs, "Deployment"):
        for container in containers(deployment):
            for env in container.get("env", []):
                if "value" in env:
                    assert not is_secret_key(env["name"]), f"{env['name']} has its value inlined"
                else:
                    assert set(env["valueFrom"]) == {"secretKeyRef"}, env
            assert "envFrom" not in container or all("secretRef" in e for e in container["envFrom"])
            for key, value in conf_of(container).items():
                # secrets are settings naming files (…password.file, …token.file), never values
                assert not is_secret_key(key), f"--conf {key}=... on the command line"
                if key.endswith((".file", ".location")):
                    assert value.startswith(SECRETS_ROOT), (key, value)
    for secret in secrets:
        assert "stringData" not in secret
        token = the_token(docs)
        # 48 random letters and digits, and nowhere but in the Secret
        assert len(token) == 48
        assert set(token) <= set(string.ascii_letters + string.digits)
        assert text.count(token) == 0
        assert text.count(secret["data"]["token"]) == 1


@needs_helm
def test_the_token_is_generated_unless_an_existing_secret_is_given(tmp_path: Path) -> None:
    # without a cluster (lookup finds nothing), each render draws a new token: at install time
    first, second = (the_token(render({}, tmp_path)) for _ in range(2))
    assert first != second
    docs = render({"writerCoordinator": {"auth": {"existingSecret": "writers-token"}}}, tmp_path)
    assert of_kind(docs, "Secret") == []
    volumes = {v["name"]: v for v in pod_spec(the_coordinator(docs, "Deployment"))["volumes"]}
    assert volumes["coordinator-token"]["secret"]["secretName"] == "writers-token"
    assert volumes["coordinator-token"]["secret"]["items"] == [{"key": "token", "path": "token"}]
    # without the writer-coordinator, no token
    assert of_kind(render({"writerCoordinator": {"enabled": False}}, tmp_path), "Secret") == []


@dataclass
class Cluster:
    """The Secrets of a namespace, and the pod filesystem the kubelet builds from them."""

    root: Path
    secrets: dict[str, dict[str, str]] = field(default_factory=dict)

    def mount(self, deployment: Mapping[str, Any], container: Mapping[str, Any]) -> Path:
        """Lay out ``container``'s Secret volumes under a directory of its own, as in the pod: one
        file per item (every key without items), at mountPath/path."""
        pod = self.root / f"{component(deployment)}-{container['name']}"
        volumes = {v["name"]: v for v in pod_spec(deployment)["volumes"]}
        for mount in container["volumeMounts"]:
            secret = volumes[mount["name"]].get("secret")
            if secret is None:
                continue
            data = self.secrets[secret["secretName"]]
            for item in secret.get("items") or [{"key": k, "path": k} for k in data]:
                assert item["key"] in data, f"Secret {secret['secretName']} has no key {item['key']}"
                file = pod / mount["mountPath"].lstrip("/") / item["path"]
                file.parent.mkdir(parents=True, exist_ok=True)
                file.write_text(data[item["key"]])
        return pod


def in_pod(conf: Mapping[str, str], pod: Path) -> dict[str, str]:
    """``conf`` with the pod's absolute file paths moved under ``pod``."""
    return {k: str(pod / v.lstrip("/")) if v.startswith(SECRETS_ROOT) else v for k, v in conf.items()}


@pytest.fixture
def cluster(tmp_path: Path) -> Cluster:
    """The Secrets FULL and MSK_IAM name, with real certificates."""
    pki = tmp_path / "pki"
    ca = make_ca(pki, "kafka-ca")
    client = issue(ca, pki, "tidemark", client=True)
    server = issue(make_ca(pki, "coordinator-ca"), pki, "coordinator")
    return Cluster(
        tmp_path / "pods",
        {
            "kafka-tidemark": {"sasl-password": "kafka password\n"},
            "kafka-tidemark-tls": {
                "ca.crt": ca.cert.read_text(),
                "tls.crt": client.cert.read_text(),
                "tls.key": client.key.read_text(),
            },
            "coordinator-tls": {"tls.crt": server.cert.read_text(), "tls.key": server.key.read_text()},
            "writers-token": {"api-token": "w" * 40},
        },
    )


@needs_helm
@pytest.mark.parametrize("override", [FULL, MSK_IAM], ids=["everything-on", "msk-iam"])
def test_secret_files_are_where_the_services_read_them(
    override: dict[str, Any], cluster: Cluster, tmp_path: Path
) -> None:
    """Each service's rendered --conf, read by its real settings parsers against its mounted
    Secrets: a path that misses its file (a Secret volume mounts a directory) fails here."""
    docs = render(override, tmp_path)
    for secret in of_kind(docs, "Secret"):
        cluster.secrets[secret["metadata"]["name"]] = {
            k: base64.b64decode(v).decode() for k, v in secret["data"].items()
        }
    kafka = chart_values(override)["kafka"]["security"]
    for deployment in of_kind(docs, "Deployment"):
        container = the_container(deployment)
        conf = conf_of(container)
        pod = cluster.mount(deployment, container)
        security = KafkaSecurity.from_conf(in_pod(conf, pod), env={})
        assert (security.protocol, security.mechanism) == (kafka["protocol"], kafka["saslMechanism"])
        if kafka["saslMechanism"] == "OAUTHBEARER":
            assert (security.oauthbearer_method, security.aws_region) == ("aws_msk_iam", "eu-west-1")
            assert security.password is None
            assert security.ca_location is None
        else:
            assert conf["tidemark.kafka.sasl.password.file"] == SASL_PASSWORD_FILE
            assert conf["tidemark.kafka.ssl.ca.location"] == KAFKA_CA_FILE
            assert security.username == "tidemark"
            assert security.password == "kafka password"
            assert security.certificate_location
            assert security.key_location
        if component(deployment) == COORDINATOR:
            assert conf[TOKEN_FILE_KEY] == TOKEN_FILE
            api = ApiSecurity.from_conf(in_pod(conf, pod))
            assert api.token is not None
            assert api.token.decode() in cluster.secrets[token_secret(deployment)].values()
            assert api.tls is not None  # the certificate of coordinator-tls, loaded
        else:
            assert not any(k.startswith("tidemark.writer.coordinator.") for k in conf)


@needs_helm
def test_writers_are_told_where_the_token_is(tmp_path: Path) -> None:
    """The install notes' settings for Spark, with the Secret mounted as Spark on Kubernetes mounts
    it (every key a file in the directory named), lead the writer to the coordinator's token."""
    for override in ({}, MSK_IAM):
        assert HELM is not None
        notes = HELM.notes(override, tmp_path)
        if notes is None:
            pytest.skip(f"{HELM.source} does not render NOTES.txt")
        settings = dict(re.findall(r"^\s*([\w./-]+)=(\S+)$", notes, re.MULTILINE))
        (secret_setting,) = [k for k in settings if k.startswith("spark.kubernetes.driver.secrets.")]
        secret = secret_setting.removeprefix("spark.kubernetes.driver.secrets.")
        docs = render(override, tmp_path)
        data = {"writers-token": {"api-token": "w" * 40}}
        data.update({s["metadata"]["name"]: {"token": the_token(docs)} for s in of_kind(docs, "Secret")})
        pod = tmp_path / "driver"
        for key, value in data[secret].items():
            file = pod / settings[secret_setting].lstrip("/") / key
            file.parent.mkdir(parents=True, exist_ok=True)
            file.write_text(value)
        token = read_token_file(in_pod(settings, pod)[TOKEN_FILE_KEY])
        assert token in data[token_secret(the_coordinator(docs, "Deployment"))].values()
        # the labels the NetworkPolicy lets in, on the driver and on the executors
        for role in ("driver", "executor"):
            assert settings[f"spark.kubernetes.{role}.label.tidemark.io/writer"] == "true"


@needs_helm
@pytest.mark.parametrize(
    ("security", "message"),
    [
        # values.schema.json's
        ({"protocol": "TLS"}, r"kafka.security.protocol'?: value must be one of 'PLAINTEXT', 'SSL', 'SASL_PLAINTEXT'"),
        ({"protocol": "SASL_SSL"}, r"kafka\.security\.saslMechanism must be PLAIN, SCRAM-SHA-256"),
        (
            {"protocol": "SASL_SSL", "saslMechanism": "SCRAM-SHA-256", "saslUsername": "u"},
            r"needs kafka\.security\.saslUsername and kafka\.security\.saslPasswordSecret\.name",
        ),
        ({"tlsSecret": {"name": "ca"}}, r"tlsSecret\.name is set but kafka\.security\.protocol PLAINTEXT"),
        ({"saslUsername": "u"}, r"kafka\.security\.sasl\* is set but kafka\.security\.protocol PLAINTEXT"),
        (
            {"protocol": "SASL_SSL", "saslMechanism": "OAUTHBEARER"},
            r"OAUTHBEARER needs kafka\.security\.oauthbearerMethod aws_msk_iam",
        ),
        ({"protocol": "SSL", "tlsSecret": {"clientCertificate": True}}, r"clientCertificate needs .*tlsSecret\.name"),
    ],
)
def test_kafka_security_mistakes_fail_the_render(security: dict[str, Any], message: str, tmp_path: Path) -> None:
    with pytest.raises(RenderError, match=message):
        render({"kafka": {"security": security}}, tmp_path)


# --- NetworkPolicies -------------------------------------------------------------------------


@dataclass(frozen=True)
class Endpoint:
    """A pod (``labels``) in a namespace, or an address outside the cluster (``labels`` None)."""

    ip: str
    namespace: str = ""
    namespace_labels: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] | None = None


def namespace(name: str, **labels: str) -> dict[str, str]:
    return {"kubernetes.io/metadata.name": name, **labels}


PROMETHEUS = Endpoint("10.1.0.5", "monitoring", namespace("monitoring"), {"app.kubernetes.io/name": "prometheus"})
GRAFANA = Endpoint("10.1.0.6", "monitoring", namespace("monitoring"), {"app.kubernetes.io/name": "grafana"})
SPARK_NS = namespace("spark", **{"tidemark.io/writers": "allowed"})
WRITER = Endpoint("10.2.0.7", "spark", SPARK_NS, {"tidemark.io/writer": "true", "spark-role": "executor"})
UNLABELLED_SPARK = Endpoint("10.2.0.8", "spark", SPARK_NS, {"spark-role": "executor"})
WRITER_ELSEWHERE = Endpoint("10.3.0.9", "etl", namespace("etl"), {"tidemark.io/writer": "true"})
OPERATOR_LABELS = {"app.kubernetes.io/part-of": "tidemark", "app.kubernetes.io/component": "operator"}
OPERATOR_POD = Endpoint("10.4.0.2", NAMESPACE, namespace(NAMESPACE), OPERATOR_LABELS)
OPERATOR_ELSEWHERE = Endpoint("10.3.0.3", "etl", namespace("etl"), OPERATOR_LABELS)
NEIGHBOUR = Endpoint("10.4.0.3", NAMESPACE, namespace(NAMESPACE), {"app": "something-else"})
KUBE_DNS = Endpoint("10.0.0.10", "kube-system", namespace("kube-system"), {"k8s-app": "kube-dns"})
MINIO = Endpoint("10.5.0.4", "storage", namespace("storage"), {"app": "minio"})
BROKER = Endpoint("10.20.3.4")  # FULL's brokers are in 10.20.0.0/16
ELSEWHERE = Endpoint("10.30.0.1")
API_SERVER = Endpoint("172.20.0.1")
INTERNET = Endpoint("93.184.216.34")
IMDS = Endpoint("169.254.169.254")


def selects(selector: Mapping[str, Any] | None, labels: Mapping[str, str] | None) -> bool:
    if selector is None or labels is None:
        return False
    assert set(selector) <= {"matchLabels"}, "the chart's selectors use matchLabels only"
    return dict(selector.get("matchLabels") or {}).items() <= dict(labels).items()


def peer_matches(peer: Mapping[str, Any], other: Endpoint, policy_namespace: str) -> bool:
    if "ipBlock" in peer:
        # pod addresses are not matched by ipBlock on every CNI: only addresses outside the cluster
        block = peer["ipBlock"]
        address = ipaddress.ip_address(other.ip)
        excluded = any(address in ipaddress.ip_network(e) for e in block.get("except", []))
        return other.labels is None and address in ipaddress.ip_network(block["cidr"]) and not excluded
    if "namespaceSelector" in peer:
        if not selects(peer["namespaceSelector"], other.namespace_labels):
            return False
    elif other.namespace != policy_namespace:
        return False
    return selects(peer.get("podSelector", {}), other.labels)


def port_matches(rule: Mapping[str, Any], port: int, protocol: str, named: Mapping[str, int]) -> bool:
    if "ports" not in rule:
        return True
    for p in rule["ports"]:
        number = named.get(p["port"], -1) if isinstance(p["port"], str) else p["port"]
        if number == port and p.get("protocol", "TCP") == protocol:
            return True
    return False


@dataclass
class Network:
    """A release's NetworkPolicies and pods, evaluated as Kubernetes does (allow-lists, unioned)."""

    docs: list[dict[str, Any]]

    def _pod(self, service: str) -> tuple[dict[str, str], dict[str, int]]:
        deployment = the_deployment(self.docs, service)
        container = the_container(deployment)
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        return deployment["spec"]["template"]["metadata"]["labels"], ports

    def _policies(self, service: str, kind: str) -> list[dict[str, Any]]:
        labels, _ = self._pod(service)
        return [
            p
            for p in of_kind(self.docs, "NetworkPolicy")
            if selects(p["spec"]["podSelector"], labels) and kind in p["spec"]["policyTypes"]
        ]

    def ingress(self, source: Endpoint, service: str, port: int | str, protocol: str = "TCP") -> bool:
        _, named = self._pod(service)
        number = named.get(port, -1) if isinstance(port, str) else port
        policies = self._policies(service, "Ingress")
        assert policies, f"no policy isolates the {service}'s ingress"
        return any(
            ("from" not in rule or any(peer_matches(p, source, NAMESPACE) for p in rule["from"]))
            and port_matches(rule, number, protocol, named)
            for policy in policies
            for rule in policy["spec"].get("ingress", [])
        )

    def egress(self, service: str, target: Endpoint, port: int, protocol: str = "TCP") -> bool:
        policies = self._policies(service, "Egress")
        assert policies, f"no policy isolates the {service}'s egress"
        return any(
            ("to" not in rule or any(peer_matches(p, target, NAMESPACE) for p in rule["to"]))
            and port_matches(rule, port, protocol, {})
            for policy in policies
            for rule in policy["spec"].get("egress", [])
        )


def the_deployment(docs: list[dict[str, Any]], service: str) -> dict[str, Any]:
    (deployment,) = [d for d in of_kind(docs, "Deployment") if component(d) == service]
    return deployment


@needs_helm
def test_network_policies_by_default(tmp_path: Path) -> None:
    docs = render({}, tmp_path)
    net = Network(docs)
    assert {component(p) for p in of_kind(docs, "NetworkPolicy")} == set(COMPONENTS)
    for service in COMPONENTS:
        # /metrics from the monitoring namespace only
        assert net.ingress(PROMETHEUS, service, "metrics")
        assert net.ingress(GRAFANA, service, "metrics")  # any pod of it, by default
        for other in (WRITER, NEIGHBOUR, OPERATOR_POD, INTERNET):
            assert not net.ingress(other, service, "metrics"), (service, other)
        for port in (22, 8080, 9500):
            assert not net.ingress(PROMETHEUS, service, port), (service, port)
        # out: DNS, the brokers' port (kafka:9092), S3's (AWS: 443); nothing else
        assert net.egress(service, KUBE_DNS, 53, "UDP")
        assert net.egress(service, KUBE_DNS, 53, "TCP")
        assert not net.egress(service, INTERNET, 53, "UDP")
        assert net.egress(service, BROKER, 9092)
        assert net.egress(service, INTERNET, 443)
        # the API server only from the operator (on its ports; any address until they are given)
        assert net.egress(service, API_SERVER, 6443) == (service == OPERATOR)
        for target, port in ((BROKER, 9093), (INTERNET, 80), (NEIGHBOUR, 5432), (IMDS, 80), (API_SERVER, 8080)):
            assert not net.egress(service, target, port), (service, target, port)
    # the marker API: labelled writers of any namespace and the operator of this one
    assert net.ingress(WRITER, COORDINATOR, "http")
    assert net.ingress(WRITER_ELSEWHERE, COORDINATOR, "http")
    assert net.ingress(OPERATOR_POD, COORDINATOR, "http")
    for other in (UNLABELLED_SPARK, OPERATOR_ELSEWHERE, NEIGHBOUR, PROMETHEUS, INTERNET):
        assert not net.ingress(other, COORDINATOR, "http"), other
    assert not net.ingress(WRITER, COORDINATOR, "metrics")

    assert of_kind(render({"networkPolicy": {"enabled": False}}, tmp_path), "NetworkPolicy") == []


@needs_helm
def test_network_policies_with_addresses_given(tmp_path: Path) -> None:
    """FULL: brokers in 10.20.0.0/16 on 9093 (the bootstrap's port), MinIO selected as a pod on
    9000 (the endpoint's port), only Prometheus's pods, writers of labelled namespaces only, and an
    extra rule for the instance metadata service."""
    net = Network(render(FULL, tmp_path))
    for service in COMPONENTS:
        assert net.ingress(PROMETHEUS, service, "metrics")
        assert not net.ingress(GRAFANA, service, "metrics")
        assert net.egress(service, BROKER, 9093)
        assert not net.egress(service, ELSEWHERE, 9093)
        assert not net.egress(service, BROKER, 9092)
        assert net.egress(service, MINIO, 9000)
        assert not net.egress(service, INTERNET, 9000)
        assert not net.egress(service, INTERNET, 443)
        # FULL gives the API server's address and port: the operator reaches it there only
        assert net.egress(service, API_SERVER, 443) == (service == OPERATOR)
        assert not net.egress(service, API_SERVER, 6443)
        assert net.egress(service, IMDS, 80)
        assert not net.egress(service, IMDS, 443)
    assert net.ingress(WRITER, COORDINATOR, "http")
    assert not net.ingress(WRITER_ELSEWHERE, COORDINATOR, "http")  # its namespace is not labelled
    # the marker API's port moved (9501): the policy names the port, so it follows
    assert net.ingress(WRITER, COORDINATOR, 9501)
    assert not net.ingress(WRITER, COORDINATOR, 9500)


@needs_helm
def test_bootstrap_without_a_port_fails_the_render(tmp_path: Path) -> None:
    with pytest.raises(RenderError, match=r"kafka\.bootstrap: \"kafka\" has no port"):
        render({"kafka": {"bootstrap": "kafka"}}, tmp_path)


# --- schemas, checkov, bandit ----------------------------------------------------------------


def newest_schema() -> str:
    return str(kubernetes_schemas.latest_version())


@needs_helm
@variants
@pytest.mark.parametrize("version", ["1.30", newest_schema()])
def test_manifests_validate_against_the_kubernetes_schemas(
    override: dict[str, Any], version: str, tmp_path: Path
) -> None:
    """Strict: a misspelt or misplaced field fails, not only a wrong type (kubernetes-validate
    ships the schemas; nothing is downloaded)."""
    unchecked = set()
    for doc in render(override, tmp_path):
        try:
            kubernetes_schemas.validate(doc, version, strict=True)
        except kubernetes_schemas.SchemaNotFoundError:
            unchecked.add((doc["apiVersion"], doc["kind"]))
        except kubernetes_schemas.ValidationError as e:
            where = ".".join(str(p) for p in e.path)
            pytest.fail(f"{doc['kind']} {doc['metadata']['name']} ({version}): {where}: {e.message}")
    # only the Prometheus Operator's and kopf's custom resources have no schema here (the CRDs
    # are checked in test_chart_operator.py)
    assert {api for api, _ in unchecked} <= {"monitoring.coreos.com/v1", "kopf.dev/v1"}, unchecked


def test_the_schema_check_can_fail() -> None:
    container = {"name": "c", "image": "i", "securityContext": {"readOnlyRootFileSystem": True}}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [container]}}
    with pytest.raises(kubernetes_schemas.ValidationError):
        kubernetes_schemas.validate(pod, "1.30", strict=True)


def find_checkov() -> str | None:
    candidates = [os.environ.get("TIDEMARK_CHECKOV"), str(REPO / ".venv" / "checkov" / "bin" / "checkov")]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("checkov")


CHECKOV = find_checkov()
CHECKOV_CONFIG = REPO / ".checkov.yaml"


def checkov(directory: Path) -> list[dict[str, Any]]:
    """checkov's failed checks on the manifests in ``directory``, with the repository's skips."""
    assert CHECKOV is not None
    command = [CHECKOV, "-d", str(directory), "--framework", "kubernetes", "--config-file", str(CHECKOV_CONFIG)]
    # --skip-download: nothing from Prisma Cloud (no network here; only docs links and severities)
    done = subprocess.run(
        [*command, "--compact", "--quiet", "--skip-download", "--output", "json"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=directory,
    )
    assert done.returncode in (0, 1), done.stderr[-2000:]
    reports = json.loads(done.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    failed = []
    for report in reports:
        assert report["summary"]["parsing_errors"] == 0, report["summary"]
        assert report["summary"]["passed"] > 0
        failed += report["results"]["failed_checks"]
    return failed


@needs_helm
@pytest.mark.skipif(
    CHECKOV is None, reason="no checkov: `make install` puts it in .venv/checkov, or set $TIDEMARK_CHECKOV"
)
def test_checkov_passes_on_the_chart_with_everything_on(tmp_path: Path) -> None:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    (manifests / "tidemark.yaml").write_text(render_text(FULL, tmp_path))
    for file in (CHART / "crds").glob("*.yaml"):  # Helm installs them first, from crds/
        (manifests / file.name).write_text(file.read_text())
    started = time.monotonic()
    failed = checkov(manifests)
    assert failed == [], [(f["check_id"], f["resource"], f["check_name"]) for f in failed]
    # the scan sees what it should: a root filesystem made writable is caught
    weakened = merged(FULL, {"securityContext": {"readOnlyRootFilesystem": False}})
    (manifests / "tidemark.yaml").write_text(render_text(weakened, tmp_path))
    assert {f["check_id"] for f in checkov(manifests)} == {"CKV_K8S_22"}
    print(f"checkov: two scans in {time.monotonic() - started:.1f} s")


def test_every_checkov_skip_gives_its_reason() -> None:
    config = yaml.safe_load(CHECKOV_CONFIG.read_text())
    lines = CHECKOV_CONFIG.read_text().splitlines()
    for check in config.get("skip-check", []):
        (at,) = [i for i, line in enumerate(lines) if line.strip() in (f"- {check}", f"- '{check}'")]
        above = lines[at - 1].strip()
        assert above.startswith("#"), f"{check} is skipped without a reason in .checkov.yaml"
        assert len(above) > 20, f"{check}: the reason above it is too short to be one"


BANDIT = Path(sys.executable).parent / "bandit"
SCANNED = ("libs", "services", "operator")


@pytest.mark.skipif(not BANDIT.exists(), reason=f"no bandit in {BANDIT.parent} (the dev extra installs it)")
def test_bandit_finds_nothing_of_medium_or_high_severity() -> None:
    done = subprocess.run(
        [str(BANDIT), "-r", *SCANNED, "-ll", "--format", "json", "--quiet"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=REPO,
    )
    report = json.loads(done.stdout)
    assert report["errors"] == []
    found = [f"{r['filename']}:{r['line_number']} {r['test_id']} {r['issue_text']}" for r in report["results"]]
    assert found == [], "fix these, or annotate them with `# nosec BXXX` and a reason"
    assert done.returncode == 0
    assert report["metrics"]["_totals"]["loc"] > 1000  # it did scan the code


def python_files() -> Iterator[Path]:
    for top in SCANNED:
        yield from (REPO / top).rglob("*.py")


def test_every_nosec_names_its_check_and_says_why() -> None:
    """A ``# nosec`` silences bandit: each names the check it silences and gives the reason, on
    its line after a second ``#`` or in the comment line above."""
    for file in python_files():
        lines = file.read_text().splitlines()
        for number, line in enumerate(lines, 1):
            comment = line.partition("#")[2]
            if "nosec" not in comment:
                continue
            where = f"{file.relative_to(REPO)}:{number}"
            assert re.search(r"nosec B\d{3}", comment), f"{where}: a nosec must name the check (nosec B608)"
            reason = comment.partition("nosec")[2].partition("#")[2].strip()
            above = lines[number - 2].strip() if number > 1 else ""
            assert len(reason) > 10 or (above.startswith("#") and len(above) > 10), f"{where}: nosec without a reason"


@needs_helm
def test_the_readme_names_the_secret_files_where_the_chart_mounts_them(tmp_path: Path) -> None:
    # a path copied from the README into a --conf must be a file the chart mounts: the Kafka CA
    # under kafka/tls/, the token as the file token/token in its Secret's directory
    mounted: set[str] = set()  # the files
    folders: set[str] = set()
    for deployment in of_kind(render(FULL, tmp_path), "Deployment"):
        pod = deployment["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in pod["volumes"]}
        for mount in the_container(deployment)["volumeMounts"]:
            secret = volumes[mount["name"]].get("secret")
            if secret and mount["mountPath"].startswith("/var/run/secrets/tidemark/"):
                folders.add(mount["mountPath"] + "/")
                mounted.update(f"{mount['mountPath']}/{item['path']}" for item in secret["items"])
    readme = (REPO / "README.md").read_text()
    named = set(re.findall(r"/var/run/secrets/tidemark/[\w./-]*", readme)) - {"/var/run/secrets/tidemark/"}
    assert named, "the README names the chart's secret files"
    for path in sorted(named):
        if path.endswith("/"):
            assert path in folders, f"README names the folder {path}; the chart mounts {sorted(folders)}"
        else:
            assert path in mounted, f"README names the file {path}; the chart mounts {sorted(mounted)}"
