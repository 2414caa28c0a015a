"""Which settings count as secrets when configuration is printed."""

from __future__ import annotations

import pytest

from tidemark.config import REDACTED, is_secret_key, redacted
from tidemark.storage import S3Options


@pytest.mark.parametrize(
    "key",
    [
        "tidemark.kafka.sasl.password",
        "sasl.jaas.config",
        "fs.s3a.secret.key",
        "fs.s3a.access.key",
        "hoodie.aws.session.token",
        "tidemark.writer.coordinator.token",
        "hoodie.metrics.datadog.api.key",
        "AWS_SECRET_ACCESS_KEY",
    ],
)
def test_secret_looking_keys_are_redacted(key: str) -> None:
    assert is_secret_key(key)
    assert redacted({key: "s3cr3t-value"}) == {key: REDACTED}


@pytest.mark.parametrize(
    "key",
    [
        # files and locations that hold a secret are paths: printed, so a wrong one can be seen
        "tidemark.kafka.sasl.password.file",
        "tidemark.writer.coordinator.token.file",
        "tidemark.kafka.ssl.key.location",
        # Hudi's own keys that merely contain "key"
        "hoodie.datasource.write.recordkey.field",
        "hoodie.table.keygenerator.class",
        "hoodie.table.recordkey.fields",
        "tidemark.kafka.sasl.username",
    ],
)
def test_other_keys_are_printed_as_they_are(key: str) -> None:
    assert not is_secret_key(key)
    assert redacted({key: "value"}) == {key: "value"}


def test_s3_options_never_show_the_secret_key() -> None:
    options = S3Options(access_key_id="AKIDEXAMPLE", secret_access_key="wJalrXUtnFEMI-secret")
    assert "wJalrXUtnFEMI-secret" not in repr(options)
    assert "wJalrXUtnFEMI-secret" not in str(options)
