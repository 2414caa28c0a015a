"""A Kubernetes API server for the operator's tests: kmock's ``KubernetesEmulator`` (by kopf's
author), served over HTTP on a loopback port from a thread of its own, with what kopf needs
declared in discovery and four fixes where kmock 0.8 does not behave like an API server.

What kopf needs (see DESIGN.md, "Kubernetes without a cluster"): every resource it serves
declared with the verbs list and watch (kmock's default is none, and kopf silently starts no
watcher for a resource it cannot watch), core ``v1/namespaces`` with a ``default`` namespace,
``v1/events`` (kopf's Events are queued and never sent without it), and kopf's peering resources
(clusterwide, and per namespace for ``--namespace``) with an object of the peering's name (kopf
does not create it; the chart does, :meth:`KubeApi.add_namespace` too). ``v1/secrets`` holds the
tables' credentials, which :func:`run_job` (the kubelet's part) gives a compaction Job's pod.

The fixes (:class:`ApiServer`):

* ``metadata.resourceVersion`` is set on create and bumped on every change: kopf's JSON patches
  ``test`` it, and with a constant version kopf would handle one change again and again;
* ``uid``, ``creationTimestamp`` and ``generation`` are filled in (the last bumped when the spec
  changes), as the API server does;
* ``generateName`` makes a name (kopf's Events use it);
* a failed JSON-patch ``test`` answers 422, as the API server does, instead of 500.

Tests talk to it as ``kubectl`` would, over HTTP (:class:`KubeApi`), and put faults in front of it
(:attr:`ApiServer.faults`, :func:`job_calls`)."""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import jsonpatch
import kmock
import pytest
from kmock._internal.k8s import KubernetesError

from tests.support.processes import ChildProcess, free_port
from tidemark.events import EventType, TimelineEvent, decode
from tidemark.kafka_adapter import EventConsumer, ensure_topics

VERBS = {"get", "list", "watch", "create", "update", "patch", "delete"}
HUDI_TABLES = "tidemark.io/v1alpha1/huditables"
JOBS = "batch/v1/jobs"
EVENTS = "v1/events"
SECRETS = "v1/secrets"
PEERINGS = "kopf.dev/v1/clusterkopfpeerings"
NAMESPACED_PEERINGS = "kopf.dev/v1/kopfpeerings"


class ApiServer(kmock.KubernetesEmulator):
    """kmock's emulator with the four fixes of the module's doc."""

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self._versions = itertools.count(1)
        #: what a test puts in front of the emulator: each takes a request and returns the answer
        #: to give instead (an aiohttp response: a proxy's error page, a refusal), or None
        self.faults: list[Callable[[Any], Any]] = []

    def _object(self, request: Any) -> Any:
        key = (request.resource, request.namespace, request.name)
        return self.objects[key] if key in self.objects and not self.objects[key].deleted else None

    async def _handle(self, request: Any) -> Any:
        for fault in list(self.faults):
            if (answer := fault(request)) is not None:
                return answer
        if request.resource is not None and isinstance(request.data, (dict, list)):
            if request.action == kmock.action.CREATE and isinstance(request.data, dict):
                meta = request.data.setdefault("metadata", {})
                if not meta.get("name") and meta.get("generateName"):
                    meta["name"] = meta["generateName"] + secrets.token_hex(3)
                meta.setdefault("uid", str(uuid.uuid4()))
                meta.setdefault("creationTimestamp", datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
                meta["resourceVersion"] = str(next(self._versions))
                meta["generation"] = 1
            elif request.action == kmock.action.UPDATE and request.name is not None:
                current = self._object(request)
                version = str(next(self._versions))
                generation = int(((current or {}).get("metadata") or {}).get("generation") or 1)
                if isinstance(request.data, dict):
                    meta = request.data.setdefault("metadata", {}) if request.data is not None else {}
                    meta["resourceVersion"] = version
                    if request.subresource is None and "spec" in request.data:
                        meta["generation"] = generation + 1
                else:  # a JSON patch: its tests run against the old version, then the new one is set
                    request.data.append({"op": "add", "path": "/metadata/resourceVersion", "value": version})
                    if request.subresource is None and any(
                        str(op.get("path", "")).startswith("/spec") for op in request.data
                    ):
                        request.data.append({"op": "add", "path": "/metadata/generation", "value": generation + 1})
        try:
            return await super()._handle(request)
        except (jsonpatch.JsonPatchTestFailed, jsonpatch.JsonPatchConflict) as e:
            return await self._render_error(KubernetesError(status=422, reason="Invalid", message=str(e)))


def declare(server: ApiServer, *, peering: str | None = "tidemark-operator") -> None:
    """The resources the operator uses, and the objects kopf expects to exist."""
    info = kmock.ResourceInfo
    server.resources[HUDI_TABLES] = info(
        kind="HudiTable", singular="huditable", shortnames={"ht"}, namespaced=True, verbs=VERBS, subresources={"status"}
    )
    server.resources[JOBS] = info(kind="Job", namespaced=True, verbs=VERBS, subresources={"status"})
    server.resources[EVENTS] = info(kind="Event", namespaced=True, verbs=VERBS)
    server.resources["v1/namespaces"] = info(kind="Namespace", namespaced=False, verbs=VERBS)
    server.resources[SECRETS] = info(kind="Secret", namespaced=True, verbs=VERBS)
    server.resources[PEERINGS] = info(kind="ClusterKopfPeering", namespaced=False, verbs=VERBS)
    server.resources[NAMESPACED_PEERINGS] = info(kind="KopfPeering", namespaced=True, verbs=VERBS)
    server.objects["v1/namespaces", None, "default"] = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "default", "uid": str(uuid.uuid4()), "resourceVersion": "0"},
    }
    if peering:
        server.objects[PEERINGS, None, peering] = {
            "apiVersion": "kopf.dev/v1",
            "kind": "ClusterKopfPeering",
            "metadata": {"name": peering, "uid": str(uuid.uuid4()), "resourceVersion": "0"},
            "status": {},
        }


class KubeApi:
    """The emulator served on a loopback port from a thread of its own, and a small client."""

    def __init__(self) -> None:
        self.server = ApiServer()
        declare(self.server)
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self.url = ""
        self._thread = threading.Thread(target=self._run, name="kmock", daemon=True)
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("the kmock API server did not start")

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._serve())

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        async with self.server, kmock.Server(self.server) as srv:
            self.url = str(srv.url).rstrip("/")
            self._ready.set()
            await self._stop.wait()

    def close(self) -> None:
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=10)

    # --- as kubectl would ---------------------------------------------------------------------

    def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method, headers={"Content-Type": content_type})
        with urllib.request.urlopen(req, timeout=10) as response:
            return json.loads(response.read() or b"null")

    def create(self, path: str, body: dict[str, Any]) -> Any:
        return self.request("POST", path, body)

    def patch(self, path: str, body: dict[str, Any]) -> Any:
        return self.request("PATCH", path, body, "application/merge-patch+json")

    def delete(self, path: str) -> Any:
        return self.request("DELETE", path)

    def get(self, path: str) -> Any:
        try:
            return self.request("GET", path)
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            raise

    def items(self, path: str) -> list[dict[str, Any]]:
        found = self.get(path)
        return list((found or {}).get("items") or [])

    def add_namespace(self, name: str, peering: str | None = "tidemark-operator") -> None:
        """A namespace, with the kopf peering object an operator watching it needs (as the chart
        makes one per watched namespace). The namespace goes straight into the emulator: kmock
        0.8's path parser takes ``namespaces`` in ``/api/v1/namespaces`` for the namespace prefix
        of a namespaced path and answers any request to it with a 500."""
        meta = {"name": name, "uid": str(uuid.uuid4()), "resourceVersion": "0"}
        self.server.objects["v1/namespaces", None, name] = {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}
        if peering:
            body = {"apiVersion": "kopf.dev/v1", "kind": "KopfPeering", "metadata": {"name": peering}, "status": {}}
            self.create(f"/apis/kopf.dev/v1/namespaces/{name}/kopfpeerings", body)

    def add_secret(self, namespace: str, name: str, values: dict[str, str]) -> None:
        data = {k: base64.b64encode(v.encode()).decode() for k, v in values.items()}
        body = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace}}
        self.create(f"/api/v1/namespaces/{namespace}/secrets", {**body, "data": data})


def job_calls(action: str, answer: Callable[[], Any]) -> Callable[[Any], Any]:
    """A fault for :attr:`ApiServer.faults`: ``answer()`` to every Job request of ``action``
    (``"create"``, ``"fetch"``: kmock's action names)."""

    def fault(request: Any) -> Any:
        jobs = request.resource is not None and (request.resource.group, request.resource.plural) == ("batch", "jobs")
        if jobs and request.action == kmock.action(action):
            return answer()
        return None

    return fault


def eventually(check: Callable[[], Any], timeout_s: float = 30.0, what: str = "the condition") -> Any:
    """``check()``'s first truthy result, polled until ``timeout_s``; fails saying ``what``."""
    import time

    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.1)
    pytest.fail(f"{what} did not happen within {timeout_s:g}s (last seen: {last!r})")


@pytest.fixture
def kube() -> Iterator[KubeApi]:
    api = KubeApi()
    try:
        yield api
    finally:
        api.close()


# --- the operator and its resources, as the tests drive them ------------------------------------

NS = "lake"


def tables(namespace: str) -> str:
    """The path of the HudiTables of ``namespace``."""
    return f"/apis/tidemark.io/v1alpha1/namespaces/{namespace}/huditables"


TABLES = tables(NS)


class Operator(ChildProcess):
    """``tidemark-operator`` as a child process against :class:`KubeApi` (a short tick), watching
    ``namespaces`` (``--namespace`` each), or every namespace when none is given."""

    def __init__(self, kube: KubeApi, bootstrap: str, topic: str, *extra: str, namespaces: Sequence[str] = ()) -> None:
        super().__init__("tidemark-operator")
        where = [arg for ns in namespaces for arg in ("--namespace", ns)] or ["--all-namespaces"]
        self.metrics_port = free_port()
        self.command = [
            sys.executable,
            "-m",
            "tidemark_operator.main",
            "--kube-server",
            kube.url,
            *where,
            "--bootstrap",
            bootstrap,
            "--topic",
            topic,
            "--tick",
            "0.3",
            "--refresh",
            "1",
            "--metrics-port",
            str(self.metrics_port),
            "--job-image",
            "tidemark:test",
            *extra,
        ]

    def start(self) -> Operator:
        self.launch(self.command, {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
        return self

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
            return str(r.read().decode())

    def stop(self) -> None:
        self.signal_and_wait(signal.SIGTERM, 15)


def resource(name: str, spec: dict[str, Any], namespace: str = NS) -> dict[str, Any]:
    return {
        "apiVersion": "tidemark.io/v1alpha1",
        "kind": "HudiTable",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def status(kube: KubeApi, name: str, namespace: str = NS) -> dict[str, Any]:
    found = kube.get(f"{tables(namespace)}/{name}")
    return dict((found or {}).get("status") or {})


def conditions(kube: KubeApi, name: str, namespace: str = NS) -> dict[str, dict[str, Any]]:
    """The status's conditions by type."""
    return {c["type"]: c for c in status(kube, name, namespace).get("conditions", [])}


def run_job(kube: KubeApi, job: Mapping[str, Any], env: Mapping[str, str], timeout_s: float = 120) -> str:
    """The kubelet's part for a compaction Job: run its container's command (the CLI, in this
    interpreter) with the container's environment, its ``secretKeyRef`` values read from the
    Secret on the API server, then mark the Job Complete or Failed as the exit status says. The
    command's output; the test fails if the Job failed."""
    (container,) = job["spec"]["template"]["spec"]["containers"]
    namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
    pod_env = dict(env)
    for var in container.get("env") or []:
        ref = (var.get("valueFrom") or {}).get("secretKeyRef")
        if ref is None:
            pod_env[var["name"]] = var.get("value", "")
            continue
        secret = kube.get(f"/api/v1/namespaces/{namespace}/secrets/{ref['name']}")
        assert secret is not None, f"Job {name}: no Secret {ref['name']} in {namespace}"
        pod_env[var["name"]] = base64.b64decode(secret["data"][ref["key"]]).decode()
    assert container["command"] == ["tidemark"], container["command"]
    run = subprocess.run(
        [sys.executable, "-m", "tidemark.cli.main", *container["args"]],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=pod_env,
    )
    ok = run.returncode == 0
    condition = {"type": "Complete" if ok else "Failed", "status": "True", "message": run.stderr[-300:]}
    kube.patch(
        f"/apis/batch/v1/namespaces/{namespace}/jobs/{name}/status",
        {"status": {"conditions": [condition], "succeeded" if ok else "failed": 1}},
    )
    assert ok, f"Job {name} failed:\n{run.stdout}\n{run.stderr}"
    return run.stdout


class Topic:
    """Everything published on one (new) topic, read by a consumer of its own from the start."""

    def __init__(self, bootstrap: str) -> None:
        self.name = f"tidemark-op-{uuid.uuid4().hex[:10]}"
        ensure_topics(bootstrap, [self.name], partitions=1)
        self.consumer = EventConsumer(bootstrap, [self.name], f"reader-{uuid.uuid4().hex[:8]}")
        self.events: list[TimelineEvent] = []
        self.ids: list[str] = []

    def read(self) -> list[TimelineEvent]:
        for message in self.consumer.poll(0.5):
            event = decode(message.key, message.value, message.headers)
            self.events.append(event)
            self.ids.append(dict(message.headers)["ce_id"].decode())
        return self.events

    def requests(self, type_: EventType) -> list[TimelineEvent]:
        return [e for e in self.read() if e.type is type_]

    def close(self) -> None:
        self.consumer.close()
