"""A ``HudiTable``'s spec, parsed into small immutable values, with errors that say what is wrong
and where (``spec.clean.interval: ...``).

The API server checks the CRD's OpenAPI schema, but a schema cannot say everything (a retention
that contradicts itself, a cron expression, a Hudi key set twice), and an operator must survive a
resource stored before the schema was tightened; so everything is checked again here. A bad spec
is a :class:`SpecError` listing every problem found, never an exception of another kind."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum
from typing import Any, Final

from tidemark.config import is_secret_key
from tidemark.errors import TableError
from tidemark.storage import canonical_location
from tidemark.table_services.archive import ArchiveConfig
from tidemark.table_services.clean import RENAMED_KEYS, CleanConfig
from tidemark_operator.cron import CronError, CronSchedule


class Service(StrEnum):
    """A table service the operator schedules; the value is its name in the spec and status."""

    COMPACTION = "compaction"
    CLEAN = "clean"
    ARCHIVE = "archive"


class ConcurrencyPolicy(StrEnum):
    FORBID = "Forbid"
    ALLOW = "Allow"


class SpecError(ValueError):
    """A spec that cannot be scheduled; ``problems`` each name the field at fault."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = tuple(problems)
        super().__init__("; ".join(problems))


_DURATION: Final = re.compile(r"([0-9]+)(ms|s|m|h|d)")
_UNITS: Final = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
#: the longest interval or request timeout a spec may give. A longer one is surely a slip, and
#: fire times are multiples of the interval since the epoch: a few million days puts them past
#: the year 9999, which no date can hold.
MAX_PERIOD: Final = timedelta(days=365)
_LOCATION: Final = re.compile(r"(s3a?://[^/]+/.*|/.*|file:///.*)")
#: conf keys the operator accepts: Hudi's, and tidemark's own (which all start with tidemark.)
_CONF_PREFIXES: Final = ("hoodie.", "tidemark.")
#: the Hudi key each named field of a service stands for (a conf map may not set it as well)
CLEAN_KEYS: Final = {
    "policy": "hoodie.cleaner.policy",
    "commitsRetained": "hoodie.cleaner.commits.retained",
    "fileVersionsRetained": "hoodie.cleaner.fileversions.retained",
    "hoursRetained": "hoodie.cleaner.hours.retained",
    "commits": "hoodie.clean.max.commits",
}
ARCHIVE_KEYS: Final = {
    "keepMinCommits": "hoodie.keep.min.commits",
    "keepMaxCommits": "hoodie.keep.max.commits",
    "beyondSavepoint": "hoodie.archive.beyond.savepoint",
}
_TRIGGER_FIELDS: Final = ("schedule", "interval")
_FIELDS: Final = {
    "": {
        "location",
        "storage",
        "suspend",
        "concurrencyPolicy",
        "requestTimeoutSeconds",
        "compaction",
        "clean",
        "archive",
        "conf",
    },
    "storage": {"endpoint", "region", "credentialsSecret"},
    "storage.credentialsSecret": {"name", "accessKeyIdKey", "secretAccessKeyKey"},
    "compaction": {"enabled", "deltaCommits", *_TRIGGER_FIELDS, "sparkMaster", "resources", "conf"},
    "compaction.resources": {"requests", "limits"},
    "clean": {"enabled", *CLEAN_KEYS, *_TRIGGER_FIELDS},
    "archive": {"enabled", *ARCHIVE_KEYS, *_TRIGGER_FIELDS},
}


def parse_duration(text: str) -> timedelta:
    """``30s``, ``15m``, ``6h``, ``1d``, ``500ms``: a positive period."""
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not a period (a whole number and ms, s, m, h or d: 30s, 15m, 6h)")
    digits = match[1].lstrip("0")
    # past 12 digits any unit is longer than MAX_PERIOD (and int() refuses thousands of digits)
    seconds = int(digits or 0) * _UNITS[match[2]] if len(digits) <= 12 else math.inf
    if seconds <= 0:
        raise ValueError(f"{text!r} is not a positive period")
    return period(seconds, repr(text))


def period(seconds: float, given: str) -> timedelta:
    """``seconds`` as a period, if it is no longer than :data:`MAX_PERIOD`; ``given`` is the
    value as the spec gives it, for the error."""
    if seconds > MAX_PERIOD.total_seconds():
        raise ValueError(f"{given} is too long (at most {MAX_PERIOD.days} days)")
    return timedelta(seconds=seconds)


@dataclass(frozen=True)
class Trigger:
    """When a service is due: at a cron schedule's times, at multiples of an interval since the
    epoch, and/or after ``commits`` commits (delta commits for compaction) since it last ran."""

    cron: CronSchedule | None = None
    interval: timedelta | None = None
    commits: int | None = None

    @property
    def timed(self) -> bool:
        return self.cron is not None or self.interval is not None

    def describe(self) -> str:
        parts = []
        if self.cron is not None:
            parts.append(f"cron {self.cron.expression!r}")
        if self.interval is not None:
            parts.append(f"every {self.interval.total_seconds():g}s")
        if self.commits is not None:
            parts.append(f"after {self.commits} commits")
        return ", ".join(parts) or "never"


@dataclass(frozen=True)
class CredentialsSecret:
    name: str
    access_key_id_key: str = "AWS_ACCESS_KEY_ID"
    secret_access_key_key: str = "AWS_SECRET_ACCESS_KEY"


@dataclass(frozen=True)
class ServiceSpec:
    """One service of one table: whether it runs, when, and the Hudi keys it runs with."""

    service: Service
    enabled: bool
    trigger: Trigger
    conf: Mapping[str, str] = field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class CompactionSpec(ServiceSpec):
    spark_master: str | None = None
    resources: Mapping[str, Mapping[str, str]] = field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class TableSpec:
    location: str
    endpoint: str | None
    region: str | None
    credentials: CredentialsSecret | None
    suspend: bool
    concurrency_policy: ConcurrencyPolicy
    request_timeout: timedelta
    compaction: CompactionSpec
    clean: ServiceSpec
    archive: ServiceSpec
    #: the table-wide Hudi keys (spec.conf)
    conf: Mapping[str, str] = field(default_factory=dict, hash=False)

    @property
    def canonical_location(self) -> str:
        """The table's one spelling (``s3a://`` as ``s3://``, ``//`` and ``.`` resolved), as the
        write job, the services and ``tidemark compact`` name it: the key of its events, so the
        operator's requests go to the same partition as the table's other events and its answers
        are found whichever spelling the spec has. ``location`` stays as typed, for what users read."""
        return canonical_location(self.location)

    def services(self) -> tuple[ServiceSpec, ...]:
        return (self.compaction, self.clean, self.archive)

    def service(self, service: Service) -> ServiceSpec:
        return {Service.COMPACTION: self.compaction, Service.CLEAN: self.clean, Service.ARCHIVE: self.archive}[service]


class _Reader:
    """Collects every problem of a spec rather than stopping at the first."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    def fail(self, where: str, message: str) -> None:
        self.problems.append(f"spec.{where}: {message}" if where else f"spec: {message}")

    def section(self, raw: Mapping[str, Any], where: str) -> Mapping[str, Any]:
        value = raw.get(where.rsplit(".", 1)[-1]) if where else raw
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            self.fail(where, f"must be an object, not {type(value).__name__}")
            return {}
        unknown = sorted(set(value) - _FIELDS[where])
        if unknown:
            self.fail(where, f"unknown field{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}")
        return value

    def string(self, raw: Mapping[str, Any], where: str, key: str) -> str | None:
        value = raw.get(key)
        if value is None or value == "":
            return None
        if not isinstance(value, str):
            self.fail(_join(where, key), f"must be a string, not {value!r}")
            return None
        return value

    def boolean(self, raw: Mapping[str, Any], where: str, key: str, default: bool) -> bool:
        value = raw.get(key, default)
        if not isinstance(value, bool):
            self.fail(_join(where, key), f"must be true or false, not {value!r}")
            return default
        return value

    def integer(self, raw: Mapping[str, Any], where: str, key: str, minimum: int) -> int | None:
        value = raw.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            self.fail(_join(where, key), f"must be a whole number of at least {minimum}, not {value!r}")
            return None
        return value

    def conf(self, raw: Mapping[str, Any], where: str) -> dict[str, str]:
        value = raw.get("conf")
        if value is None:
            return {}
        at = _join(where, "conf")
        if not isinstance(value, Mapping):
            self.fail(at, f"must be a map of Hudi keys to strings, not {type(value).__name__}")
            return {}
        conf: dict[str, str] = {}
        for key, item in value.items():
            if not isinstance(key, str) or not key.startswith(_CONF_PREFIXES):
                self.fail(at, f"unknown key {key!r} (only Hudi's hoodie.* and tidemark.* keys)")
            elif not isinstance(item, str):
                self.fail(f"{at}.{key}", f"must be a string (quote it), not {item!r}")
            elif is_secret_key(key):
                # it would be written into a compaction Job's args, readable by anyone who reads pods
                self.fail(f"{at}.{key}", "names a secret: give it in the table's credentials Secret, not in the spec")
            else:
                conf[key] = item
        return conf

    def trigger(self, raw: Mapping[str, Any], where: str, commits_key: str | None) -> Trigger:
        cron = interval = None
        if (text := self.string(raw, where, "schedule")) is not None:
            try:
                cron = CronSchedule.parse(text)
            except CronError as e:
                self.fail(_join(where, "schedule"), str(e))
        if (text := self.string(raw, where, "interval")) is not None:
            try:
                interval = parse_duration(text)
            except ValueError as e:
                self.fail(_join(where, "interval"), str(e))
        commits = self.integer(raw, where, commits_key, 1) if commits_key else None
        return Trigger(cron, interval, commits)


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _named_conf(r: _Reader, raw: Mapping[str, Any], where: str, keys: Mapping[str, str]) -> dict[str, str]:
    """The Hudi keys the named fields of a section stand for, as strings."""
    conf = {}
    for name, key in keys.items():
        value = raw.get(name)
        if value is None:
            continue
        if name == "policy":
            text = r.string(raw, where, name)
        elif name == "beyondSavepoint":
            text = str(r.boolean(raw, where, name, False)).lower()
        else:
            number = r.integer(raw, where, name, 1)
            text = None if number is None else str(number)
        if text is not None:
            conf[key] = text
    return conf


def _no_twice(
    r: _Reader, named: Mapping[str, str], conf: Mapping[str, str], where: str, keys: Mapping[str, str]
) -> None:
    by_key = {v: k for k, v in keys.items()}
    for key in named:
        for spelling in (key, RENAMED_KEYS.get(key)):
            if spelling and spelling in conf:
                r.fail(f"conf.{spelling}", f"contradicts spec.{where}.{by_key[key]}: set it in one place")


def parse_spec(raw: Mapping[str, Any] | None) -> TableSpec:
    """The spec of a ``HudiTable``; :class:`SpecError` names every problem."""
    r = _Reader()
    if not isinstance(raw, Mapping):
        raise SpecError(["spec: missing (a HudiTable needs at least spec.location)"])
    top = r.section(raw, "")
    location = r.string(top, "", "location")
    if location is None:
        r.fail("location", "missing: the table's base path (s3://bucket/prefix or an absolute path)")
    elif not _LOCATION.fullmatch(location):
        r.fail("location", f"{location!r} is neither s3://bucket/prefix nor an absolute path")
    storage = r.section(top, "storage")
    secret_raw = r.section(storage, "storage.credentialsSecret") if "credentialsSecret" in storage else {}
    credentials = None
    if secret_raw:
        name = r.string(secret_raw, "storage.credentialsSecret", "name")
        if name is None:
            r.fail("storage.credentialsSecret.name", "missing: the Secret holding the access key pair")
        else:
            credentials = CredentialsSecret(
                name,
                r.string(secret_raw, "storage.credentialsSecret", "accessKeyIdKey") or "AWS_ACCESS_KEY_ID",
                r.string(secret_raw, "storage.credentialsSecret", "secretAccessKeyKey") or "AWS_SECRET_ACCESS_KEY",
            )
    policy_text = top.get("concurrencyPolicy", ConcurrencyPolicy.FORBID.value)
    try:
        policy = ConcurrencyPolicy(policy_text)
    except ValueError:
        r.fail("concurrencyPolicy", f"must be Forbid or Allow, not {policy_text!r}")
        policy = ConcurrencyPolicy.FORBID
    timeout = timedelta(seconds=900)
    if (seconds := r.integer(top, "", "requestTimeoutSeconds", 1)) is not None:
        try:
            timeout = period(seconds, str(seconds))
        except ValueError as e:
            r.fail("requestTimeoutSeconds", str(e))
    suspend = r.boolean(top, "", "suspend", False)
    table_conf = r.conf(top, "")

    compaction_raw = r.section(top, "compaction")
    compaction_conf = r.conf(compaction_raw, "compaction")
    resources_raw = r.section(compaction_raw, "compaction.resources")
    resources: dict[str, dict[str, str]] = {}
    for kind in ("requests", "limits"):
        amounts = resources_raw.get(kind) or {}
        if not isinstance(amounts, Mapping):
            r.fail(f"compaction.resources.{kind}", "must be a map such as {cpu: '1', memory: 2Gi}")
            continue
        resources[kind] = {str(k): str(v) for k, v in amounts.items()}
    compaction = CompactionSpec(
        Service.COMPACTION,
        r.boolean(compaction_raw, "compaction", "enabled", True),
        r.trigger(compaction_raw, "compaction", "deltaCommits"),
        {**table_conf, **compaction_conf},
        r.string(compaction_raw, "compaction", "sparkMaster"),
        resources,
    )

    clean_raw = r.section(top, "clean")
    clean_named = _named_conf(r, clean_raw, "clean", {k: v for k, v in CLEAN_KEYS.items() if k != "commits"})
    _no_twice(r, clean_named, table_conf, "clean", CLEAN_KEYS)
    clean = ServiceSpec(
        Service.CLEAN,
        r.boolean(clean_raw, "clean", "enabled", True),
        r.trigger(clean_raw, "clean", "commits"),
        {**table_conf, **clean_named},
    )
    archive_raw = r.section(top, "archive")
    archive_named = _named_conf(r, archive_raw, "archive", ARCHIVE_KEYS)
    _no_twice(r, archive_named, table_conf, "archive", ARCHIVE_KEYS)
    archive = ServiceSpec(
        Service.ARCHIVE,
        r.boolean(archive_raw, "archive", "enabled", True),
        r.trigger(archive_raw, "archive", None),
        {**table_conf, **archive_named},
    )
    # Hudi's own checks of the settings: a contradictory retention is refused as the services would
    for what, check in (("clean", CleanConfig.from_conf), ("archive", ArchiveConfig.from_conf)):
        try:
            check({**table_conf, **(clean.conf if what == "clean" else archive.conf)})
        except TableError as e:
            r.fail(what, str(e))
    # no trigger and no `enabled`: the operator does not schedule it (the services' own triggers remain)
    if not (compaction.trigger.timed or compaction.trigger.commits) and "enabled" not in compaction_raw:
        compaction = dataclasses.replace(compaction, enabled=False)
    if not (clean.trigger.timed or clean.trigger.commits) and "enabled" not in clean_raw:
        clean = dataclasses.replace(clean, enabled=False)
    if not archive.trigger.timed and "enabled" not in archive_raw:
        archive = dataclasses.replace(archive, enabled=False)
    for service in (compaction, clean, archive):
        if service.enabled and not (service.trigger.timed or service.trigger.commits):
            r.fail(
                service.service.value,
                "enabled but never due: give schedule (cron), interval"
                + (", or deltaCommits" if service.service is Service.COMPACTION else "")
                + (", or commits" if service.service is Service.CLEAN else "")
                + " (or enabled: false)",
            )
    if r.problems:
        raise SpecError(r.problems)
    assert location is not None
    return TableSpec(
        location=location.rstrip("/"),
        endpoint=r.string(storage, "storage", "endpoint"),
        region=r.string(storage, "storage", "region"),
        credentials=credentials,
        suspend=suspend,
        concurrency_policy=policy,
        request_timeout=timeout,
        compaction=compaction,
        clean=clean,
        archive=archive,
        conf=table_conf,
    )
