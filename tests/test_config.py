"""How settings are read (a switch that is neither true nor false is refused wherever it is read)
and which settings count as secrets when configuration is printed."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from tidemark.config import (
    REDACTED,
    SWITCH_KEYS,
    check_switches,
    conf_bool,
    is_secret_key,
    kafka_brokers,
    redacted,
    unread_keys,
)
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


def test_every_switch_is_checked_by_every_command() -> None:
    """``check_switches`` refuses a bad switch before any command runs, read by it or not: every
    true/false key tidemark reads is in its list, and none of them is warned about as unread."""
    from tidemark.spark.write_job import SET_NULL_FOR_MISSING
    from tidemark.table import key_generator, metadata_table, properties
    from tidemark.table.bloom_filter import BLOOM_FILTER_ENABLED
    from tidemark.table.concurrency import EARLY_COMMIT_CHECK_KEY

    read = {
        SET_NULL_FOR_MISSING,
        BLOOM_FILTER_ENABLED,
        EARLY_COMMIT_CHECK_KEY,
        key_generator.CONSISTENT_TIMESTAMP,
        key_generator.COMPLEX_NEW_ENCODING,
        metadata_table.METADATA_ENABLE,
        metadata_table.CDC_ENABLED,
        properties.URL_ENCODE,
        properties.DROP_PARTITION_COLUMNS,
        "hoodie.combine.before.insert",
        "hoodie.datasource.write.insert.drop.duplicates",
    }
    assert read <= SWITCH_KEYS
    assert unread_keys(dict.fromkeys(SWITCH_KEYS, "true")) == []
    check_switches(dict(zip(sorted(SWITCH_KEYS), ["true", " FALSE "] * 20, strict=False)))
    for key in SWITCH_KEYS:
        with pytest.raises(TableError, match=f"^{re.escape(key)}='yes': expected true or false$"):
            check_switches({"hoodie.cleaner.commits.retained": "3", key: "yes"})


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


def test_a_misspelt_retention_of_the_cleaner_is_named() -> None:
    # a clean deletes by these: a misspelt one fell back to its default without a word
    conf = {
        "hoodie.cleaner.fileversions.retaind": "4",
        "hoodie.cleaner.fileversions.retained": "4",
        "hoodie.keep.min.comits": "5",
        "hoodie.clean.commits.retained": "2",
        "hoodie.archive.beyond.savepoint": "true",
    }
    assert unread_keys(conf) == ["hoodie.cleaner.fileversions.retaind", "hoodie.keep.min.comits"]


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (
            "hoodie.copyonwrite.record.size.estimate",
            "-3",
            "hoodie.copyonwrite.record.size.estimate=-3: must be at least 1",
        ),
        ("hoodie.copyonwrite.insert.split.size", "0", "hoodie.copyonwrite.insert.split.size=0: must be at least 1"),
        ("hoodie.parquet.max.file.size", "0", "hoodie.parquet.max.file.size=0: must be at least 1"),
        ("hoodie.parquet.max.file.size", "1e9", "hoodie.parquet.max.file.size='1e9': expected a whole number"),
        ("hoodie.parquet.small.file.limit", "-1", "hoodie.parquet.small.file.limit=-1: must be at least 0"),
        (
            "hoodie.record.size.estimation.threshold",
            "nan",
            "hoodie.record.size.estimation.threshold='nan': expected a finite number",
        ),
        (
            "hoodie.record.size.estimation.threshold",
            "-1",
            "hoodie.record.size.estimation.threshold=-1: must be at least 0",
        ),
        (
            "hoodie.record.size.estimation.threshold",
            "half",
            "hoodie.record.size.estimation.threshold='half': expected a number",
        ),
    ],
)
def test_a_bad_file_sizing_value_is_refused_with_its_key_and_value(key: str, value: str, message: str) -> None:
    # before, one message named neither the key nor the value, and a negative small-file limit or
    # a NaN or negative estimation threshold were taken silently
    with pytest.raises(TableError, match=f"^{re.escape(message)}$"):
        SmallFileConfig.from_conf({key: value})


def test_valid_file_sizing_values_are_taken() -> None:
    config = SmallFileConfig.from_conf(
        {
            "hoodie.parquet.small.file.limit": "0",
            "hoodie.parquet.max.file.size": "2048",
            "hoodie.copyonwrite.record.size.estimate": "16",
            "hoodie.record.size.estimation.threshold": "0.5",
            "hoodie.copyonwrite.insert.split.size": "7",
        }
    )
    assert config == SmallFileConfig(
        small_file_limit=0, max_file_size=2048, record_size_estimate=16, estimation_threshold=0.5, split_size=7
    )
    assert SmallFileConfig.from_conf({}) == SmallFileConfig()


@pytest.mark.parametrize(
    ("bootstrap", "brokers"),
    [
        ("kafka:9092", [("kafka", 9092)]),
        (" b-1.kafka.local:9092 , [::1]:9093 ", [("b-1.kafka.local", 9092), ("::1", 9093)]),
        # a listener's protocol before the address, as Kafka's clients take it (Amazon MSK's lists)
        (
            "SASL_SSL://b-1.msk.amazonaws.com:9098,SASL_SSL://b-2.msk.amazonaws.com:9098",
            [("b-1.msk.amazonaws.com", 9098), ("b-2.msk.amazonaws.com", 9098)],
        ),
        ("PLAINTEXT://[::1]:9092", [("::1", 9092)]),
        ("a:9092,", [("a", 9092)]),  # a trailing comma, skipped as Kafka's clients skip it
    ],
)
def test_a_bootstrap_is_read_as_kafkas_clients_read_it(bootstrap: str, brokers: list[tuple[str, int]]) -> None:
    assert kafka_brokers(bootstrap) == brokers


@pytest.mark.parametrize(
    ("bootstrap", "message"),
    [
        ("a:9092,b", "'b' in 'a:9092,b' is not HOST:PORT"),
        ("::1:9092", "'::1:9092' is not HOST:PORT (an IPv6 address in brackets: [::1]:9092)"),
        ("SSL://kafka:x", "'SSL://kafka:x': 'x' is not a port number (1 to 65535)"),
        ("kafka:65536", "'kafka:65536': '65536' is not a port number"),
        (" , ", "' , ' names no broker"),
    ],
)
def test_a_bootstrap_kafkas_clients_would_misread_is_refused_naming_the_entry(bootstrap: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        kafka_brokers(bootstrap)
