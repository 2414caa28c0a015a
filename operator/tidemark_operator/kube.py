"""The few Kubernetes calls the operator makes besides kopf's own: create and read the compaction
Jobs. A small aiohttp client on the credentials kopf logged in with (kopf ships no general client,
and a whole Kubernetes client library for two calls would be the larger risk)."""

from __future__ import annotations

import json
import ssl
from dataclasses import dataclass
from typing import Any

import aiohttp
import kopf


class KubeError(RuntimeError):
    """The API server refused a request, with its answer; ``status`` is the API server's HTTP
    status (None when the answer was not the API server's: a dropped connection, a proxy's page)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status

    @property
    def refused(self) -> bool:
        """Whether the API server refused the request itself (invalid, forbidden, over a quota):
        asked again, it answers the same until something changes. A throttle (429) is not."""
        return self.status is not None and 400 <= self.status < 500 and self.status != 429


@dataclass
class JobClient:
    connection: kopf.ConnectionInfo

    def _ssl(self) -> ssl.SSLContext | bool:
        info = self.connection
        if info.insecure:
            return False
        context = ssl.create_default_context(
            cafile=str(info.ca_path) if info.ca_path else None,
            cadata=info.ca_data.decode() if isinstance(info.ca_data, bytes) else info.ca_data,
        )
        if info.certificate_path and info.private_key_path:
            context.load_cert_chain(str(info.certificate_path), str(info.private_key_path))
        return context

    async def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
        info = self.connection
        headers = {"Accept": "application/json"}
        if info.token:
            headers["Authorization"] = f"{info.scheme or 'Bearer'} {info.token}"
        auth = aiohttp.BasicAuth(info.username, info.password or "") if info.username else None
        timeout = aiohttp.ClientTimeout(total=30)
        # every failure is a KubeError (or an OSError): the caller logs it and its look goes on
        try:
            async with (
                aiohttp.ClientSession(timeout=timeout) as session,
                session.request(
                    method, info.server.rstrip("/") + path, json=body, headers=headers, auth=auth, ssl=self._ssl()
                ) as response,
            ):
                text = await response.text(errors="replace")
        except aiohttp.ClientError as e:  # a dropped connection (ServerDisconnectedError) is not an OSError
            raise KubeError(f"{method} {path}: {type(e).__name__}: {e}") from e
        try:
            data = json.loads(text) if text else {}
        except ValueError:
            # an HTML error page of a load balancer or proxy in front of the API server
            raise KubeError(f"{method} {path}: {response.status}, not a JSON answer: {text[:120]!r}") from None
        return response.status, data if isinstance(data, dict) else {}

    async def create_job(self, namespace: str, job: dict[str, Any]) -> bool:
        """Create ``job``; False when a Job of that name exists already (made by another replica
        or before a restart: the same request)."""
        status, answer = await self._call("POST", f"/apis/batch/v1/namespaces/{namespace}/jobs", job)
        if status == 409:
            return False
        if status >= 300:
            raise KubeError(f"creating Job {job['metadata']['name']} in {namespace}: {_said(status, answer)}", status)
        return True

    async def job_state(self, namespace: str, name: str) -> dict[str, Any] | None:
        """``{"name", "active", "failed", "message"}`` of a Job, None when it is gone."""
        status, answer = await self._call("GET", f"/apis/batch/v1/namespaces/{namespace}/jobs/{name}")
        if status == 404:
            return None
        if status >= 300:
            raise KubeError(f"reading Job {name} in {namespace}: {_said(status, answer)}", status)
        job_status = answer.get("status") or {}
        finished = {c.get("type"): c for c in job_status.get("conditions") or [] if c.get("status") == "True"}
        failed = "Failed" in finished
        return {
            "name": name,
            "active": not failed and "Complete" not in finished,
            "failed": failed,
            # why Kubernetes failed it: BackoffLimitExceeded (its pod failed), DeadlineExceeded
            # (it ran, or waited to start, longer than its activeDeadlineSeconds), ...
            "reason": (finished.get("Failed") or {}).get("reason", ""),
            "message": (finished.get("Failed") or {}).get("message", ""),
        }


def _said(status: int, answer: dict[str, Any]) -> str:
    """The API server's answer as it gives it: ``403 Forbidden: exceeded quota: ...``."""
    reason = answer.get("reason")
    return f"{status}{f' {reason}' if reason else ''}: {answer.get('message')}"
