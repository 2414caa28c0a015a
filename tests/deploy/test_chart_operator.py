"""The operator's part of the chart: on by default, its arguments parsed by the operator's own
parser, its pod as locked down as the services', its RBAC exactly what it uses, the whole rendering
valid against Kubernetes' schemas and clean under checkov (cluster-wide here; FULL with the CRDs in
test_chart_security.py); and the CRDs themselves valid."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kopf
import pytest
import yaml
from kubernetes_validate import utils as kubernetes_schemas

from tests.deploy.test_chart import (
    CHART,
    FULL,
    HELM,
    NAMESPACE,
    RELEASE,
    component,
    merged,
    needs_helm,
    of_kind,
    render,
)
from tests.deploy.test_chart_security import CHECKOV, POD_UID, checkov, conf_of, newest_schema, render_text
from tidemark.kafka_security import KafkaSecurity
from tidemark_operator.main import build_parser

ON: dict[str, Any] = {}
CLUSTERWIDE = merged(FULL, {"operator": {"clusterwide": True}})
VARIANTS = {"defaults": ON, "everything-on": FULL, "clusterwide": CLUSTERWIDE}
variants = pytest.mark.parametrize("override", list(VARIANTS.values()), ids=list(VARIANTS))
NAME = f"{RELEASE}-tidemark-operator"


def operator_docs(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if component(d) == "operator"]


def the_operator(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (deployment,) = [d for d in of_kind(docs, "Deployment") if component(d) == "operator"]
    return deployment


@needs_helm
def test_the_operator_is_on_by_default_and_can_be_switched_off(tmp_path: Path) -> None:
    kinds = sorted(d["kind"] for d in operator_docs(render({}, tmp_path)))
    assert kinds == [
        "Deployment",
        "KopfPeering",
        "NetworkPolicy",
        "Role",
        "RoleBinding",
        "Service",
        "ServiceAccount",
    ]
    off = render({"operator": {"enabled": False}}, tmp_path)
    assert operator_docs(off) == []
    # without it nothing in the release may call the Kubernetes API
    assert not {d["kind"] for d in off} & {"Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}
    assert HELM is not None
    assert HELM.lint(CLUSTERWIDE, tmp_path) == []


@needs_helm
@variants
def test_the_operator_args_parse_with_its_own_parser(override: dict[str, Any], tmp_path: Path) -> None:
    docs = render(override, tmp_path)
    (container,) = the_operator(docs)["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["tidemark-operator"]
    args = build_parser().parse_args(container["args"])
    values = merged(yaml.safe_load((CHART / "values.yaml").read_text()), override)
    assert args.bootstrap == values["kafka"]["bootstrap"]
    assert args.topic == values["kafka"]["topic"]
    assert args.metrics_host == "0.0.0.0"
    assert args.metrics_port == values["metrics"]["port"]
    assert args.peering == NAME
    assert args.job_image == container["image"]  # compactions run in the operator's own image
    assert args.job_ttl == values["operator"]["jobs"]["ttlSecondsAfterFinished"]
    assert args.job_deadline == values["operator"]["jobs"]["activeDeadlineSeconds"]
    assert args.storage_timeout == values["operator"]["storageTimeout"]
    assert args.read_threads == values["operator"]["readThreads"]
    if values["operator"]["clusterwide"]:
        assert args.all_namespaces
        assert args.namespace == []
    else:
        assert args.namespace == (values["operator"]["namespaces"] or [NAMESPACE])
    # the same Kafka settings as the services (which test_chart_security.py reads against mounted Secrets)
    (cleaner,) = [d for d in of_kind(docs, "Deployment") if component(d) == "cleaner"]
    cleaner_conf = conf_of(cleaner["spec"]["template"]["spec"]["containers"][0])
    kafka = {k: v for k, v in args.conf if k.startswith("tidemark.kafka.")}
    assert kafka == {k: v for k, v in cleaner_conf.items() if k.startswith("tidemark.kafka.")}
    if not kafka:
        assert KafkaSecurity.from_conf(kafka, env={}).protocol == "PLAINTEXT"
    assert {p["name"] for p in container["ports"]} == {"metrics"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    # a broker refusing requests or out of reach, or a TLS/SASL refusal, is for readiness: a restart fixes none
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}


@needs_helm
@variants
def test_the_operator_pod_is_locked_down_and_its_token_only_in_its_container(
    override: dict[str, Any], tmp_path: Path
) -> None:
    spec = the_operator(render(override, tmp_path))["spec"]["template"]["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert spec["securityContext"]["runAsUser"] == POD_UID
    assert spec["securityContext"]["runAsNonRoot"] is True
    (container,) = spec["containers"]
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    token = mounts["/var/run/secrets/kubernetes.io/serviceaccount"]
    assert token["readOnly"] is True
    sources = volumes[token["name"]]["projected"]["sources"]
    assert sources[0]["serviceAccountToken"]["expirationSeconds"] <= 3607
    for mount in mounts.values():
        if "secret" in volumes[mount["name"]]:
            assert mount["readOnly"] is True
            assert volumes[mount["name"]]["secret"]["defaultMode"] == 0o440


EXPECTED_RULES = {
    ("tidemark.io", "huditables"): {"get", "list", "watch", "patch"},
    ("tidemark.io", "huditables/status"): {"get", "patch"},
    ("tidemark.io", "huditables/finalizers"): {"update"},
    ("", "events"): {"create"},
    ("batch", "jobs"): {"create", "get"},
}


@needs_helm
@variants
def test_rbac_grants_exactly_what_the_operator_uses(override: dict[str, Any], tmp_path: Path) -> None:
    docs = render(override, tmp_path)
    clusterwide = bool(override.get("operator", {}).get("clusterwide"))
    roles = of_kind(docs, "ClusterRole" if clusterwide else "Role")
    bindings = of_kind(docs, "ClusterRoleBinding" if clusterwide else "RoleBinding")
    assert not of_kind(docs, "Role" if clusterwide else "ClusterRole")
    namespaces = override.get("operator", {}).get("namespaces") or [NAMESPACE]
    assert sorted(r["metadata"].get("namespace", "*") for r in roles) == (["*"] if clusterwide else sorted(namespaces))
    peering = "clusterkopfpeerings" if clusterwide else "kopfpeerings"
    for role in roles:
        granted = {
            (g, r): set(rule["verbs"]) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
        }
        assert granted == {**EXPECTED_RULES, ("kopf.dev", peering): {"get", "list", "watch", "patch"}}
        for rule in role["rules"]:
            assert "*" not in rule["verbs"]
            assert "*" not in rule["resources"]
    (account,) = [a for a in of_kind(docs, "ServiceAccount") if component(a) == "operator"]
    for binding in bindings:
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": NAMESPACE}
        ]
    # one peering object per namespace served (kopf does not create it)
    kind = "ClusterKopfPeering" if clusterwide else "KopfPeering"
    assert [p["metadata"]["name"] for p in of_kind(docs, kind)] == [NAME] * len(roles)
    # and the other services still have no RBAC at all
    assert all(component(b) == "operator" for b in bindings)


@needs_helm
@variants
def test_rbac_lets_the_operator_make_jobs_that_block_their_tables_deletion(
    override: dict[str, Any], tmp_path: Path
) -> None:
    # where OwnerReferencesPermissionEnforcement is on (OpenShift), an ownerReference with
    # blockOwnerDeletion needs update on the owner's finalizers, or every Job is refused (403)
    body = {"apiVersion": "tidemark.io/v1alpha1", "kind": "HudiTable", "metadata": {"name": "orders", "uid": "u"}}
    owner = kopf.build_owner_reference(body)
    assert owner["blockOwnerDeletion"] is True
    roles = of_kind(
        render(override, tmp_path), "ClusterRole" if override.get("operator", {}).get("clusterwide") else "Role"
    )
    assert roles
    for role in roles:
        assert any(
            "tidemark.io" in rule["apiGroups"]
            and "huditables/finalizers" in rule["resources"]
            and "update" in rule["verbs"]
            for rule in role["rules"]
        )


@needs_helm
@variants
@pytest.mark.parametrize("version", ["1.30", newest_schema()])
def test_manifests_with_the_operator_validate(override: dict[str, Any], version: str, tmp_path: Path) -> None:
    unchecked = set()
    for doc in render(override, tmp_path):
        try:
            kubernetes_schemas.validate(doc, version, strict=True)
        except kubernetes_schemas.SchemaNotFoundError:
            unchecked.add(doc["apiVersion"])
        except kubernetes_schemas.ValidationError as e:
            where = ".".join(str(p) for p in e.path)
            pytest.fail(f"{doc['kind']} {doc['metadata']['name']} ({version}): {where}: {e.message}")
    assert unchecked <= {"monitoring.coreos.com/v1", "kopf.dev/v1"}, unchecked


@pytest.mark.parametrize("version", ["1.30", newest_schema()])
def test_the_crds_validate(version: str) -> None:
    for file in sorted((CHART / "crds").glob("*.yaml")):
        for doc in yaml.safe_load_all(file.read_text()):
            kubernetes_schemas.validate(doc, version, strict=True)


@needs_helm
@pytest.mark.skipif(CHECKOV is None, reason="no checkov: `make install` puts it in .venv/checkov")
def test_checkov_passes_with_the_operator_clusterwide(tmp_path: Path) -> None:
    """A ClusterRole is what checkov's RBAC checks look at hardest."""
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    (manifests / "tidemark.yaml").write_text(render_text(CLUSTERWIDE, tmp_path))
    for file in (CHART / "crds").glob("*.yaml"):
        (manifests / file.name).write_text(file.read_text())
    failed = checkov(manifests)
    assert failed == [], [(f["check_id"], f["resource"], f["check_name"]) for f in failed]
