"""Reading Hudi's ``key=value`` settings (``--conf``): one helper, so every setting is looked up
and reported the same way, and one rule for which settings are secrets when they are printed."""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Mapping
from typing import Final

from tidemark.errors import TableError

#: What printed configuration shows instead of a secret's value.
REDACTED: Final = "***"

# A key is secret-looking when one of its dot-separated words names a secret. Keys that name a
# file or location holding one (``...password.file``, ``...token.file``) are paths, not secrets,
# and stay readable so that a misconfiguration can be seen.
#: anywhere in a key, whole words or run together (Hadoop's fs.s3n.awsSecretAccessKey, Hive's
#: javax.jdo.option.ConnectionPassword, Azure's fs.azure.account.key.<account>, fs.s3a.encryption.key)
_SECRET_WORD: Final = re.compile(
    r"password|passwd|secret|token|credential|jaas|private[._-]?key|access[._-]?key|session[._-]?token|"
    r"api[._-]?key|account[._-]?key|encryption[._-]?key|sas[._-]?key",
    re.IGNORECASE,
)
_PATH_SUFFIX: Final = re.compile(r"[._-](file|location|path|dir|secret[._-]?name|secret[._-]?ref)$", re.IGNORECASE)


#: the ``hoodie.*`` keys some part of tidemark reads (a name ending in ``.`` is a family: every key
#: under it); others are warned about
HUDI_KEY_FAMILIES: Final = (
    # Hudi has many more keys under these two: each one tidemark reads, so that a misspelt one
    # (table.tpye) is warned about rather than left at its default unseen
    "hoodie.datasource.write.drop.partition.columns",
    "hoodie.datasource.write.hive_style_partitioning",
    "hoodie.datasource.write.insert.drop.duplicates",
    "hoodie.datasource.write.keygenerator.class",
    "hoodie.datasource.write.keygenerator.consistent.logical.timestamp.enabled",
    "hoodie.datasource.write.keygenerator.type",
    "hoodie.datasource.write.operation",
    "hoodie.datasource.write.partitionpath.field",
    "hoodie.datasource.write.partitionpath.urlencode",
    "hoodie.datasource.write.payload.class",
    "hoodie.datasource.write.precombine.field",
    "hoodie.datasource.write.recordkey.field",
    "hoodie.datasource.write.table.name",
    "hoodie.datasource.write.table.type",
    "hoodie.table.name",
    "hoodie.table.type",
    "hoodie.table.recordkey.fields",
    "hoodie.table.precombine.field",
    "hoodie.table.partition.fields",
    "hoodie.table.keygenerator.class",
    "hoodie.table.cdc.enabled",
    "hoodie.table.complex.keygen.encoding",
    "hoodie.keygen.",
    "hoodie.deltastreamer.keygen.",
    # the cleaner's and archiver's keys one by one: a misspelt retention would otherwise fall
    # back to its default unseen, and a clean deletes by it
    "hoodie.cleaner.policy",
    "hoodie.clean.policy",
    "hoodie.cleaner.commits.retained",
    "hoodie.clean.commits.retained",
    "hoodie.cleaner.fileversions.retained",
    "hoodie.cleaner.hours.retained",
    "hoodie.cleaner.incremental.mode",
    "hoodie.clean.max.commits",
    "hoodie.keep.min.commits",
    "hoodie.keep.max.commits",
    "hoodie.archive.beyond.savepoint",
    "hoodie.write.",
    "hoodie.metadata.",
    "hoodie.logfile.",
    "hoodie.parquet.small.file.limit",
    "hoodie.parquet.max.file.size",
    "hoodie.parquet.compression.codec",
    "hoodie.parquet.bloom.filter.enabled",
    "hoodie.parquet.block.size",
    "hoodie.parquet.page.size",
    "hoodie.parquet.dictionary.enabled",
    "hoodie.copyonwrite.",
    "hoodie.compaction.",
    "hoodie.record.",
    "hoodie.client.heartbeat.",
    "hoodie.populate.meta.fields",
    "hoodie.combine.before.insert",
    # read to refuse any but their defaults (restating a default is no reason for a warning)
    "hoodie.combine.before.upsert",
    "hoodie.datasource.insert.dup.policy",
    "hoodie.merge.allow.duplicate.on.inserts",
    "hoodie.payload.delete.field",
    "hoodie.payload.delete.marker",
    "hoodie.database.name",
    "hoodie.timeline.layout.version",
    "hoodie.index.type",
    "hoodie.read.timeline.holes.resolution.policy",
    # the writer-coordinator's batching of marker requests
    "hoodie.markers.timeline_server_based.batch.interval_ms",
    "hoodie.markers.timeline_server_based.batch.num_threads",
)


#: the switches (true/false keys) tidemark reads, checked on every command that takes ``--conf``:
#: one a command does not read was taken silently with any value (``yes``, ``1``), and the same
#: ``--conf`` then failed on the command that reads it
SWITCH_KEYS: Final = frozenset(
    {
        "hoodie.archive.beyond.savepoint",
        "hoodie.cleaner.incremental.mode",
        "hoodie.combine.before.insert",
        "hoodie.combine.before.upsert",
        "hoodie.copyonwrite.insert.auto.split",
        "hoodie.datasource.write.drop.partition.columns",
        "hoodie.datasource.write.hive_style_partitioning",
        "hoodie.datasource.write.insert.drop.duplicates",
        "hoodie.datasource.write.keygenerator.consistent.logical.timestamp.enabled",
        "hoodie.datasource.write.partitionpath.urlencode",
        "hoodie.merge.allow.duplicate.on.inserts",
        "hoodie.metadata.enable",
        "hoodie.parquet.bloom.filter.enabled",
        "hoodie.parquet.dictionary.enabled",
        "hoodie.populate.meta.fields",
        "hoodie.table.cdc.enabled",
        "hoodie.write.complex.keygen.new.encoding",
        "hoodie.write.concurrency.early.conflict.check.commit.conflict",
        "hoodie.write.concurrency.early.conflict.detection.enable",
        "hoodie.write.set.null.for.missing.columns",
        "tidemark.clean.archive.enabled",
    }
)


_HUDI_KEYS_READ: Final = frozenset(k for k in HUDI_KEY_FAMILIES if not k.endswith("."))
_HUDI_FAMILIES_READ: Final = tuple(k for k in HUDI_KEY_FAMILIES if k.endswith("."))


def is_hudi_key_read(key: str) -> bool:
    """Whether some part of tidemark reads the ``hoodie.*`` key: one of its keys exactly (so that
    ``...write.operationX`` is not taken for ``...write.operation``) or a key of one of its families."""
    return key in _HUDI_KEYS_READ or key.startswith(_HUDI_FAMILIES_READ)


def unread_keys(conf: Mapping[str, str]) -> list[str]:
    """The keys of ``conf`` that nothing in tidemark reads: ``hoodie.*`` keys it does not read
    (:func:`is_hudi_key_read`), and keys neither Hudi's, tidemark's (``tidemark.*``) nor Spark's
    (``spark.*``)."""
    return sorted(k for k in conf if not (is_hudi_key_read(k) or k.startswith(("tidemark.", "spark."))))


def refuse_unknown_keys(conf: Mapping[str, str], prefix: str, known: tuple[str, ...], what: str) -> None:
    """A ValueError naming the keys of ``conf`` in the family ``prefix`` that are not ``known``, each
    with the known keys spelt like it: a misspelt key would silently leave its setting at the default
    (no TLS, say). A ``tidemark.*`` key whose family is spelt like ``prefix``
    (``tidemark.writer.cordinator.tls.cert.file``) counts as in it; other ``tidemark.*`` keys pass."""
    tails = {k: _family_tail(k, prefix, known) for k in conf if k not in known}
    unknown = sorted(k for k, tail in tails.items() if tail is not None)
    if not unknown:
        return

    def named(key: str) -> str:
        # in lower case, as the known keys are spelt (a key in capitals is the same mistake)
        tail = (tails[key] or "").lower()
        # the known key with that tail (a family misspelt), else a key cut short (tls.cert for
        # tls.cert.file), else one spelt alike; compared after the family, which would make every
        # key look alike
        close = (
            [k for k in known if k == prefix + tail]
            or [k for k in known if k.startswith(prefix + tail + ".")]
            or [
                prefix + k
                for k in difflib.get_close_matches(tail, [k.removeprefix(prefix) for k in known], n=2, cutoff=0.75)
            ]
        )
        return f"{key} (did you mean {' or '.join(close)}?)" if close else key

    raise ValueError(f"unknown {what} setting(s) {', '.join(named(k) for k in unknown)}; known: {', '.join(known)}")


def family_keys(conf: Mapping[str, str], prefix: str, known: tuple[str, ...]) -> list[str]:
    """The keys of ``conf`` in the family ``prefix``, known or not, counting those
    :func:`refuse_unknown_keys` counts in it (the family misspelt or left out)."""
    return sorted(k for k in conf if _family_tail(k, prefix, known) is not None)


_TIDEMARK: Final = "tidemark."


def _family_tail(key: str, prefix: str, known: tuple[str, ...]) -> str | None:
    """What follows the family in ``key`` when its family is ``prefix`` or spelt like it (compared
    after ``tidemark.``, which every key shares), else None: a known key's tail after a family
    spelt close to it or left out (``coordinator.tls.cert.file``, ``writer.coordinatortls.cert.file``),
    or the segments after as many as the family has, those spelt closer still (``writer.cordinator.x``)."""
    if key.startswith(prefix):
        return key.removeprefix(prefix)
    lowered = key.lower()
    if not lowered.startswith(_TIDEMARK):
        return None
    rest = lowered.removeprefix(_TIDEMARK)
    family = prefix.removeprefix(_TIDEMARK).rstrip(".")
    for tail in (k.removeprefix(prefix).lower() for k in known):
        head = rest.removesuffix(tail).rstrip(".")
        # the family left out (tidemark.ssl.ca.location) counts too, but a one-word tail alone
        # (tidemark.url) is too little to tell
        if head != rest and (_alike(head, family) >= 0.6 or (not head and "." in tail)):
            return tail
    parts = rest.split(".")
    size = family.count(".") + 1
    if len(parts) > size and _alike(".".join(parts[:size]), family) >= 0.8:
        return ".".join(parts[size:])
    return None


def _alike(a: str, b: str) -> float:
    return difflib.SequenceMatcher(None, a, b).ratio()


def comma_fields(text: str | None) -> tuple[str, ...] | None:
    """Field names from the comma-separated text Hudi's key options hold ("a, b": a and b); None
    for None (not given)."""
    return None if text is None else tuple(f.strip() for f in text.split(",") if f.strip())


def kafka_brokers(text: str) -> list[tuple[str, int]]:
    """The brokers of a Kafka bootstrap list, ``HOST:PORT[,HOST:PORT...]`` (an IPv6 address in
    brackets: ``[::1]:9092``), as kafka-python reads it. ``ValueError`` naming the bad entry: kafka-python
    would end in a traceback on a port that is no number, and take one above 65535 modulo 65536."""
    brokers = []
    for item in text.split(","):
        entry = item.strip()
        if not entry:  # a trailing comma: skipped, as Kafka's own clients skip it
            continue
        where = repr(entry) if entry == text.strip() else f"{entry!r} in {text!r}"
        # a listener's protocol before the address (SASL_SSL://b-1.msk...:9098), as Kafka's
        # clients take it: the protocol itself is tidemark.kafka.security.protocol's
        entry = re.sub(r"^[A-Za-z][A-Za-z0-9_]*://", "", entry)
        if entry.startswith("["):
            host, _, rest = entry[1:].partition("]")
            port = rest[1:] if rest.startswith(":") else ""
        else:
            host, _, port = entry.rpartition(":")
            if ":" in host:  # an IPv6 address without brackets: its port cannot be told apart
                host = ""
        if not host:
            raise ValueError(f"{where} is not HOST:PORT (an IPv6 address in brackets: [::1]:9092)")
        if not port.isdigit() or not 0 < int(port) <= 65535:
            raise ValueError(f"{where}: {port!r} is not a port number (1 to 65535)")
        brokers.append((host, int(port)))
    if not brokers:
        raise ValueError(f"{text!r} names no broker (HOST:PORT[,HOST:PORT...])")
    return brokers


def check_switches(conf: Mapping[str, str]) -> None:
    """Refuse a switch of :data:`SWITCH_KEYS` that is neither true nor false, as
    :func:`conf_bool` does, whether or not the command reads it."""
    for key in sorted(SWITCH_KEYS.intersection(conf)):
        conf_bool(conf, key, default=False)


def present_key(conf: Mapping[str, str], *keys: str) -> str:
    """The first of ``keys`` present in ``conf`` (Hudi renamed some keys; both spellings are
    accepted, the newer first), else the first of them."""
    return next((key for key in keys if key in conf), keys[0])


def conf_value(conf: Mapping[str, str], *keys: str, default: str) -> str:
    """The value of the first of ``keys`` present in ``conf``, else ``default``."""
    return conf.get(present_key(conf, *keys), default)


def conf_int(conf: Mapping[str, str], key: str, default: int, least: int = 0) -> int:
    """A whole-number setting, refused with its key and value when it is not one (or is below
    ``least``)."""
    text = conf_value(conf, key, default=str(default))
    try:
        value = int(text)
    except ValueError as e:
        raise TableError(f"{key}={text!r}: expected a whole number") from e
    if value < least:
        raise TableError(f"{key}={value}: must be at least {least}")
    return value


def conf_float(conf: Mapping[str, str], key: str, default: float, least: float = 0.0) -> float:
    """A number setting, refused with its key and value when it is not a finite number (``nan``,
    ``inf`` would compare false with everything and pass every check) or is below ``least``."""
    text = conf_value(conf, key, default=str(default))
    try:
        value = float(text)
    except ValueError as e:
        raise TableError(f"{key}={text!r}: expected a number") from e
    if not math.isfinite(value):
        raise TableError(f"{key}={text!r}: expected a finite number")
    if value < least:
        raise TableError(f"{key}={text}: must be at least {least:g}")
    return value


def conf_bool(conf: Mapping[str, str], *keys: str, default: bool) -> bool:
    """A true/false setting (any case; the first of ``keys`` present, as :func:`conf_value`),
    refused with its key and value when it is neither: ``yes`` is not taken for false."""
    key = present_key(conf, *keys)
    return switch(key, conf[key]) if key in conf else default


def switch(name: str, value: object) -> bool:
    """A switch's value: True or False, or the text true or false in any case; anything else
    (``yes``, ``1``) is refused with ``name`` and the value, never taken for false."""
    if isinstance(value, bool):
        return value
    lowered = value.strip().lower() if isinstance(value, str) else None
    if lowered not in ("true", "false"):
        raise TableError(f"{name}={value!r}: expected true or false")
    return lowered == "true"


def is_secret_key(key: str) -> bool:
    """Whether a setting's value must not be printed (``sasl.password``, ``aws.secret.access.key``,
    ``sasl.jaas.config``, ``...token``), going by its name."""
    return bool(_SECRET_WORD.search(key)) and not _PATH_SUFFIX.search(key)


def redacted(conf: Mapping[str, str]) -> dict[str, str]:
    """``conf`` fit to print: the values of secret-looking keys replaced by :data:`REDACTED`."""
    return {key: REDACTED if is_secret_key(key) else value for key, value in conf.items()}
