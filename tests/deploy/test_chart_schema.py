"""values.schema.json: Helm checks the values against it before rendering anything, so a wrong type,
an unknown choice, a negative quantity or a misspelt key fails the install with the value's path,
while the free-form maps (Hudi's conf, annotations, any resource name) stay free."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.deploy.test_chart import CHART, FULL, RenderError, merged, needs_helm, render
from tests.deploy.test_chart_operator import CLUSTERWIDE
from tests.deploy.test_chart_security import MSK_IAM

SCHEMA = CHART / "values.schema.json"
GOOD = {"defaults": {}, "everything-on": FULL, "msk-iam": MSK_IAM, "clusterwide": CLUSTERWIDE}


def schema() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(SCHEMA.read_text())
    return loaded


def test_the_schema_is_draft_07_and_describes_every_default() -> None:
    """Helm reads draft-07; every section of values.yaml is closed (additionalProperties false), so
    the defaults passing means no key of values.yaml is left out of the schema."""
    loaded = schema()
    assert loaded["$schema"] == "http://json-schema.org/draft-07/schema#"
    jsonschema.Draft7Validator.check_schema(loaded)
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    validator = jsonschema.Draft7Validator(loaded)
    for name, override in GOOD.items():
        errors = [
            f"{'.'.join(map(str, e.path))}: {e.message}" for e in validator.iter_errors(merged(defaults, override))
        ]
        assert errors == [], name
    assert set(loaded["properties"]) - {"global"} == set(defaults)


@needs_helm
@pytest.mark.parametrize("override", list(GOOD.values()), ids=list(GOOD))
def test_good_values_render(override: dict[str, Any], tmp_path: Path) -> None:
    assert render(override, tmp_path)


@needs_helm
@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"operator": {"replicas": "two"}}, r"/operator/replicas'?: got string, want integer"),
        ({"operator": {"replicas": -1}}, r"/operator/replicas'?: minimum: got -1, want 0"),
        (
            {"kafka": {"security": {"protocol": "TLS"}}},
            r"/kafka/security/protocol'?: value must be one of 'PLAINTEXT', 'SSL', 'SASL_PLAINTEXT', 'SASL_SSL'",
        ),
        (
            {"kafka": {"security": {"saslMechanism": "GSSAPI"}}},
            r"/kafka/security/saslMechanism'?: value must be one of",
        ),
        # a negative quantity, as a string and as a number
        ({"operator": {"resources": {"limits": {"memory": "-1Gi"}}}}, r"/operator/resources/limits/memory'?: '-1Gi'"),
        ({"cleaner": {"resources": {"requests": {"cpu": -1}}}}, r"/cleaner/resources/requests/cpu'?: minimum: got -1"),
        ({"metrics": {"port": 70000}}, r"/metrics/port'?: maximum: got 70,000, want 65,535"),
        ({"operater": {"enabled": True}}, r"additional properties 'operater' not allowed"),
        ({"operator": {"tick": "10s"}}, r"/operator/tick'?: got string, want number"),
        ({"operator": {"namespaces": ["Lake_House"]}}, r"/operator/namespaces/0'?: 'Lake_House' does not match"),
        ({"operator": {"networkPolicy": {"apiServer": {"ports": []}}}}, r"/operator/networkPolicy/apiServer/ports"),
        ({"prometheusRule": {"archivalBlockedFor": "6 hours"}}, r"/prometheusRule/archivalBlockedFor'?: '6 hours'"),
        ({"prometheusRule": {"operator": {"pendingCompactions": 0}}}, r"/prometheusRule/operator/pendingCompactions"),
        ({"s3": {"endpoint": "minio:9000"}}, r"/s3/endpoint'?: 'minio:9000' does not match"),
        ({"image": {"pullPolicy": "Sometimes"}}, r"/image/pullPolicy'?: value must be one of 'Always'"),
        ({"writerCoordinator": {"enabled": "yes"}}, r"/writerCoordinator/enabled'?: got string, want boolean"),
        # a secret in a conf map would be written into the Deployment's args, in clear
        ({"cleaner": {"conf": {"tidemark.kafka.sasl.password": "x"}}}, r"invalid propertyName 'tidemark.kafka.sasl.pa"),
        ({"archiver": {"conf": {"fs.s3a.secret.key": "x"}}}, r"invalid propertyName 'fs.s3a.secret.key'"),
        (
            {"writerCoordinator": {"conf": {"tidemark.writer.coordinator.token": "x"}}},
            r"invalid propertyName 'tidemark.writer.coordinator.token'",
        ),
    ],
)
def test_bad_values_are_refused_saying_which_and_why(override: dict[str, Any], message: str, tmp_path: Path) -> None:
    with pytest.raises(RenderError, match=message):
        render(override, tmp_path)


@needs_helm
def test_free_form_maps_stay_free(tmp_path: Path) -> None:
    """Any Hudi key (numbers and booleans too), any annotation, any resource name, any pod
    security setting; and the coordinator's client namespaces as null (the release's only)."""
    free = {
        "cleaner": {"conf": {"hoodie.cleaner.commits.retained": 12, "hoodie.cleaner.incremental.mode": False}},
        "archiver": {"conf": {"hoodie.some.future.key": "x", "tidemark.kafka.sasl.password.file": "/etc/pw"}},
        "podAnnotations": {"example.com/anything": "yes"},
        "operator": {"resources": {"limits": {"nvidia.com/gpu": 1, "ephemeral-storage": "1Gi", "cpu": 0.5}}},
        "podSecurityContext": {"supplementalGroups": [2000]},
        "writerCoordinator": {"networkPolicy": {"clientNamespaceSelector": None}},
    }
    assert render(free, tmp_path)
