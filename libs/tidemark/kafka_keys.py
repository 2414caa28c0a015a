"""The names of the Kafka client settings (``tidemark.kafka.*``, librdkafka's names), apart from
:mod:`tidemark.kafka_security`, which reads them: a command that announces nothing needs no Kafka
client, yet refuses a misspelt key of this family as the services do."""

from __future__ import annotations

from typing import Final

PREFIX: Final = "tidemark.kafka."
PROTOCOL_KEY: Final = "tidemark.kafka.security.protocol"
CA_KEY: Final = "tidemark.kafka.ssl.ca.location"
CERT_KEY: Final = "tidemark.kafka.ssl.certificate.location"
KEY_KEY: Final = "tidemark.kafka.ssl.key.location"
HOSTNAME_KEY: Final = "tidemark.kafka.ssl.endpoint.identification.algorithm"
MECHANISM_KEY: Final = "tidemark.kafka.sasl.mechanism"
USERNAME_KEY: Final = "tidemark.kafka.sasl.username"
PASSWORD_KEY: Final = "tidemark.kafka.sasl.password"
PASSWORD_FILE_KEY: Final = "tidemark.kafka.sasl.password.file"
OAUTH_METHOD_KEY: Final = "tidemark.kafka.sasl.oauthbearer.method"
REGION_KEY: Final = "tidemark.kafka.aws.region"

#: the keys that may be set (the password is not: it would show in the process list and in logs)
KEYS: Final = (
    PROTOCOL_KEY,
    CA_KEY,
    CERT_KEY,
    KEY_KEY,
    HOSTNAME_KEY,
    MECHANISM_KEY,
    USERNAME_KEY,
    PASSWORD_FILE_KEY,
    OAUTH_METHOD_KEY,
    REGION_KEY,
)
