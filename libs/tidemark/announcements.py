"""A command's announcement of what it committed: ``instant.completed`` on Kafka, when its settings
ask for one (``tidemark.events.bootstrap``). A write or a compaction that announces nothing needs
no Kafka client, so the Kafka adapter is imported only when one is asked for."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

from tidemark import kafka_keys
from tidemark.config import family_keys, kafka_brokers
from tidemark.errors import MissingExtraError, TidemarkError

if TYPE_CHECKING:
    from tidemark.kafka_security import KafkaSecurity

#: where a command (a write, ``tidemark compact``) announces its commits; unset: it announces none
EVENTS_BOOTSTRAP: Final = "tidemark.events.bootstrap"
EVENTS_TOPIC: Final = "tidemark.events.topic"


def announcement_security(conf: Mapping[str, str]) -> KafkaSecurity | None:
    """The Kafka settings a command announces its commit with, checked before it changes anything
    (a password given inline, a missing CA file: ``ValueError`` naming it; no Kafka client
    installed: :class:`MissingExtraError`), so that they are its error rather than a warning after
    the commit; None when it announces nothing. A bootstrap that is no ``HOST:PORT`` list is such an
    error too."""
    bootstrap = conf.get(EVENTS_BOOTSTRAP)
    # a misspelt family (tidemark.kafak.ssl.ca.location) is checked too, as the services check it:
    # else the typo would surface only once a bootstrap is added
    if not bootstrap and not _kafka_keys(conf):
        return None
    if bootstrap:
        try:
            kafka_brokers(bootstrap)
        except ValueError as e:
            raise ValueError(f"{EVENTS_BOOTSTRAP}={bootstrap}: {e}") from None
    return _security(conf)


def _security(conf: Mapping[str, str]) -> KafkaSecurity:
    try:
        from tidemark.kafka_security import KafkaSecurity
    except ModuleNotFoundError as e:
        given = sorted([*(k for k in conf if k == EVENTS_BOOTSTRAP), *_kafka_keys(conf)])
        raise MissingExtraError(f"announcing commits on Kafka ({', '.join(given)})", e.name, "services") from None
    return KafkaSecurity.from_conf(conf)


def _kafka_keys(conf: Mapping[str, str]) -> list[str]:
    return family_keys(conf, kafka_keys.PREFIX, kafka_keys.KEYS)


def announce_completed(conf: Mapping[str, str], location: str, instant: str, action: str, who: str) -> None:
    """Publish ``instant.completed`` when ``tidemark.events.bootstrap`` is set. The commit is
    durable already: a lost event only delays the cleaner until the next one, so a failure is a
    warning of logger ``who``."""
    bootstrap = conf.get(EVENTS_BOOTSTRAP)
    if not bootstrap:
        return
    try:
        security = _security(conf)  # the command's tidemark.kafka.*, and the environment
        from tidemark.events import EventType, TimelineEvent
        from tidemark.kafka_adapter import EventProducer

        event = TimelineEvent(EventType.INSTANT_COMPLETED, location, instant, action, "COMPLETED")
        with EventProducer(bootstrap, publish_timeout_s=5.0, security=security) as producer:
            producer.publish(conf.get(EVENTS_TOPIC, "tidemark.timeline"), event)
    except (ValueError, TidemarkError) as e:
        logging.getLogger(who).warning("instant %s committed; its event was not published: %s", instant, e)
