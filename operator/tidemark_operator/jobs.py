"""The compaction Job of one request: ``tidemark compact <location>`` with the table's settings,
in a pod as locked down as the chart's own.

Why a Job and not a compactor service: compaction is the one table service whose cost grows with
the data (it rewrites every file slice with logs), so each table gets its own resources from its
spec, an out-of-memory or a crash kills one Job and not a service shared by every table, and the
Job's status is a Kubernetes record of how the compaction ended. A failed compaction leaves its
plan pending on the timeline; ``tidemark compact`` finishes pending plans before it plans a new
one, so the next request's Job completes it."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any

from tidemark_operator.spec import TableSpec

#: the pod's user: the image's tidemark user (Dockerfile USER 10001:10001)
POD_UID = 10001

#: A compaction Job's resources where the table's ``compaction.resources`` names none for a
#: resource: bounded like the chart's pods, so that a big merge on a shared node is killed alone
#: rather than starving its neighbours, and enough for a local-engine merge of a few file slices.
DEFAULT_RESOURCES: Mapping[str, Mapping[str, str]] = {
    "requests": {"cpu": "500m", "memory": "1Gi"},
    "limits": {"cpu": "2", "memory": "2Gi"},
}
#: The size of the Job's writable ``/tmp`` (the root filesystem is read-only), unless the spec's
#: ``compaction.resources.limits`` gives ``ephemeral-storage``: Spark spills there.
DEFAULT_TMP_SIZE = "2Gi"
#: How long a compaction Job may run, or wait for its pod to start, before Kubernetes fails it
#: (``activeDeadlineSeconds``): a pod that never starts (its credentials Secret missing, its image
#: not pulled) is no failed pod, and would hold every later compaction under Forbid for ever.
DEFAULT_ACTIVE_DEADLINE_S = 21600


def job_resources(spec: Mapping[str, Mapping[str, str]]) -> dict[str, dict[str, str]]:
    """The spec's requests and limits over :data:`DEFAULT_RESOURCES`, per resource: a resource
    (cpu, memory) the spec names in either takes none of the defaults, so that a spec's lower limit
    never meets a default request above it."""
    named = {resource for amounts in spec.values() for resource in amounts}
    merged: dict[str, dict[str, str]] = {}
    for kind in ("requests", "limits"):
        amounts = {r: v for r, v in DEFAULT_RESOURCES[kind].items() if r not in named}
        amounts.update(spec.get(kind) or {})
        if amounts:
            merged[kind] = amounts
    return merged


#: what Kubernetes accepts as a label value (at most 63 characters, too)
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?")


def table_label(name: str) -> str:
    """The ``tidemark.io/table`` label value of a HudiTable's Jobs: its name where that is a
    label value. A longer name (up to 253 characters) is cut and given a hash of the whole, so
    the value neither ends in ``-`` or ``.`` (the API server would refuse the Job) nor is shared
    by two names with the same first 63 characters."""
    if len(name) <= 63 and _LABEL_VALUE.fullmatch(name):
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:10]
    return f"{re.sub(r'[^-A-Za-z0-9_.]', '-', name)[:52].strip('-_.')}-{digest}".lstrip("-")


def job_name(resource: str, request_id: str) -> str:
    """A Job name per request, the same in every replica (the request id is deterministic):
    creating it twice fails the second time, so a repeated request never runs twice."""
    base = re.sub(r"[^a-z0-9-]", "-", resource.lower())[:40].strip("-") or "table"
    return f"{base}-compact-{request_id[:10]}"


def compaction_job(
    spec: TableSpec,
    *,
    resource: str,
    namespace: str,
    name: str,
    request_id: str,
    instant: str,
    image: str,
    service_account: str | None,
    ttl_seconds: int,
    owner: Mapping[str, Any],
    active_deadline_s: int = DEFAULT_ACTIVE_DEADLINE_S,
) -> dict[str, Any]:
    args = ["compact", spec.location]
    if spec.endpoint:
        args += ["--s3-endpoint", spec.endpoint]
    if spec.region:
        args += ["--s3-region", spec.region]
    conf = dict(spec.compaction.conf)
    if spec.compaction.spark_master:
        # each file slice merged by a Spark task: the Job's image must carry Spark and Java
        args += ["--engine", "spark"]
        conf["spark.master"] = spec.compaction.spark_master
    else:
        # the chart's image has no Spark: the compaction runs in the Job's own process
        args += ["--engine", "local"]
    for key, value in sorted(conf.items()):
        args += ["--conf", f"{key}={value}"]
    env: list[dict[str, Any]] = []
    if spec.credentials is not None:
        for var, key in (
            ("AWS_ACCESS_KEY_ID", spec.credentials.access_key_id_key),
            ("AWS_SECRET_ACCESS_KEY", spec.credentials.secret_access_key_key),
        ):
            env.append({"name": var, "valueFrom": {"secretKeyRef": {"name": spec.credentials.name, "key": key}}})
    resources = job_resources(spec.compaction.resources)
    container: dict[str, Any] = {
        "name": "compact",
        "image": image,
        # the image's entrypoint runs the services; the Job runs the CLI
        "command": ["tidemark"],
        "args": args,
        "env": env,
        "resources": resources,
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "privileged": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
        # nosec B108 # the Job pod's own emptyDir mount point, not a path this process writes
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],  # nosec B108
    }
    labels = {
        "app.kubernetes.io/part-of": "tidemark",
        "app.kubernetes.io/component": "compaction",
        "tidemark.io/table": table_label(name),
    }
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": POD_UID,
            "runAsGroup": POD_UID,
            "fsGroup": POD_UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [container],
        "volumes": [
            {
                "name": "tmp",
                "emptyDir": {"sizeLimit": resources.get("limits", {}).get("ephemeral-storage", DEFAULT_TMP_SIZE)},
            }
        ],
    }
    if service_account:
        pod["serviceAccountName"] = service_account
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job_name(resource, request_id),
            "namespace": namespace,
            "labels": labels,
            "annotations": {"tidemark.io/request-id": request_id, "tidemark.io/instant": instant},
            # deleting the HudiTable deletes its Jobs (never the table's data)
            "ownerReferences": [dict(owner)],
        },
        "spec": {
            # a failed compaction is finished by the next request's Job, not by retries here
            "backoffLimit": 0,
            "activeDeadlineSeconds": active_deadline_s,
            "ttlSecondsAfterFinished": ttl_seconds,
            "template": {"metadata": {"labels": labels}, "spec": pod},
        },
    }
