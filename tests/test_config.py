"""How settings are read (a switch that is neither true nor false is refused wherever it is read)
and which settings count as secrets when configuration is printed."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest

from tidemark.config import REDACTED, conf_bool, is_secret_key, redacted, unread_keys
from tidemark.errors import TableError
from tidemark.storage import S3Options
from tidemark.table.concurrency import ConcurrencyConfig
from tidemark.table.partitioner import SmallFileConfig
from tidemark.table.write_client import TableSettings
from tidemark.table.write_handles import ParquetConfig
from tidemark.table_services.archive import ArchiveConfig
from tidemark.table_services.clean import CleanConfig


def test_a_switch_is_true_or_false_in_any_case_and_the_first_key_present_wins() -> None:
    assert conf_bool({}, "a", default=True) is True
    assert conf_bool({"a": " FALSE "}, "a", default=True) is False
    assert conf_bool({"old": "true", "new": "false"}, "new", "old", default=True) is False
    with pytest.raises(TableError, match=r"^a='yes': expected true or false$"):
        conf_bool({"a": "yes"}, "a", default=False)


@pytest.mark.parametrize(
    ("read", "key"),
    [
        (CleanConfig.from_conf, "tidemark.clean.archive.enabled"),
        (CleanConfig.from_conf, "hoodie.cleaner.incremental.mode"),
        (ArchiveConfig.from_conf, "hoodie.archive.beyond.savepoint"),
        (ConcurrencyConfig.from_conf, "hoodie.write.concurrency.early.conflict.detection.enable"),
        (SmallFileConfig.from_conf, "hoodie.copyonwrite.insert.auto.split"),
        (ParquetConfig.from_conf, "hoodie.parquet.dictionary.enabled"),
        (TableSettings.from_conf, "hoodie.datasource.write.hive_style_partitioning"),
    ],
)
def test_a_switch_that_is_not_true_or_false_is_refused_not_taken_for_false(
    read: Callable[[Mapping[str, str]], Any], key: str
) -> None:
    # before, anything but "true" silently meant false ("yes", "1", "ture")
    with pytest.raises(TableError, match=f"{key}='1': expected true or false"):
        read({key: "1"})


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
        # words run together, and keys whose secret word is only "key"
        "fs.s3n.awsSecretAccessKey",
        "spark.hadoop.javax.jdo.option.ConnectionPassword",
        "fs.azure.account.key.lake.dfs.core.windows.net",
        "fs.s3a.encryption.key",
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


def test_unread_keys_names_a_key_that_only_begins_with_one_tidemark_reads() -> None:
    conf = {
        "hoodie.table.name": "t",
        "hoodie.table.nameX": "u",
        "hoodie.cleaner.policy": "KEEP_LATEST_COMMITS",
        "tidemark.clean.dry_run": "true",
    }
    assert unread_keys(conf) == ["hoodie.table.nameX"]
