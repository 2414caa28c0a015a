"""Kafka client security settings: what ``tidemark.kafka.*`` and the environment turn into, what
reaches kafka-python, and the errors bad settings get (each naming the key and, for files, the
path). The broker-side behaviour is in ``tests/services/test_kafka_security.py``."""

from __future__ import annotations

import base64
import os
import sys
import urllib.parse
from pathlib import Path

import pytest

from tests.support.tls_proxy import issue, make_ca
from tidemark.kafka_security import PASSWORD_ENV, KafkaSecurity, MskIamTokenProvider, env_name

SSL = {"tidemark.kafka.security.protocol": "SSL"}


def scram(mechanism: str = "SCRAM-SHA-512", protocol: str = "SASL_SSL") -> dict[str, str]:
    return {
        "tidemark.kafka.security.protocol": protocol,
        "tidemark.kafka.sasl.mechanism": mechanism,
        "tidemark.kafka.sasl.username": "alice",
    }


def _pem(tmp_path: Path, name: str) -> str:
    """``ca.crt``, or the client's ``tls.crt`` or ``tls.key`` it signed: real ones, since they are
    loaded at start."""
    if not (tmp_path / "tls.key").exists():
        issue(make_ca(tmp_path, "ca"), tmp_path, "tls", client=True)
    return str(tmp_path / name)


def test_plaintext_by_default() -> None:
    security = KafkaSecurity.from_conf({}, {})
    assert security.protocol == "PLAINTEXT"
    assert security.kafka_config() == {"security_protocol": "PLAINTEXT"}


def test_ssl_settings_reach_kafka_python(tmp_path: Path) -> None:
    conf = {
        "tidemark.kafka.security.protocol": "ssl",  # librdkafka accepts any case
        "tidemark.kafka.ssl.ca.location": _pem(tmp_path, "ca.crt"),
        "tidemark.kafka.ssl.certificate.location": _pem(tmp_path, "tls.crt"),
        "tidemark.kafka.ssl.key.location": _pem(tmp_path, "tls.key"),
    }
    assert KafkaSecurity.from_conf(conf, {}).kafka_config() == {
        "security_protocol": "SSL",
        "ssl_check_hostname": True,
        "ssl_cafile": str(tmp_path / "ca.crt"),
        "ssl_certfile": str(tmp_path / "tls.crt"),
        "ssl_keyfile": str(tmp_path / "tls.key"),
    }
    off = {**SSL, "tidemark.kafka.ssl.endpoint.identification.algorithm": "none"}
    assert KafkaSecurity.from_conf(off, {}).kafka_config() == {"security_protocol": "SSL", "ssl_check_hostname": False}


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_sasl_settings_reach_kafka_python(mechanism: str) -> None:
    config = KafkaSecurity.from_conf(scram(mechanism.lower()), {PASSWORD_ENV: "s3cret"}).kafka_config()
    assert config == {
        "security_protocol": "SASL_SSL",
        "ssl_check_hostname": True,
        "sasl_mechanism": mechanism,
        "sasl_plain_username": "alice",
        "sasl_plain_password": "s3cret",
    }


def test_every_key_may_come_from_the_environment_and_conf_wins(tmp_path: Path) -> None:
    password_file = tmp_path / "password"
    password_file.write_text("from-file\n")  # a trailing newline, as `echo` writes it
    env = {
        "TIDEMARK_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
        "TIDEMARK_KAFKA_SASL_MECHANISM": "SCRAM-SHA-256",
        "TIDEMARK_KAFKA_SASL_USERNAME": "env-user",
        "TIDEMARK_KAFKA_SASL_PASSWORD_FILE": str(password_file),
    }
    assert env_name("tidemark.kafka.ssl.ca.location") == "TIDEMARK_KAFKA_SSL_CA_LOCATION"
    from_env = KafkaSecurity.from_conf({}, env)
    assert (from_env.protocol, from_env.mechanism, from_env.username) == ("SASL_PLAINTEXT", "SCRAM-SHA-256", "env-user")
    assert from_env.password == "from-file"
    both = KafkaSecurity.from_conf({"tidemark.kafka.sasl.username": "conf-user"}, env)
    assert both.username == "conf-user"


def test_the_password_from_the_environment_variable() -> None:
    assert KafkaSecurity.from_conf(scram(), {PASSWORD_ENV: "pw from env"}).password == "pw from env"


def test_the_password_is_refused_on_the_command_line() -> None:
    with pytest.raises(ValueError, match=r"tidemark\.kafka\.sasl\.password must not be given") as e:
        KafkaSecurity.from_conf({**scram(), "tidemark.kafka.sasl.password": "oops"}, {})
    assert "oops" not in str(e.value)
    assert PASSWORD_ENV in str(e.value)


def test_the_password_never_shows_in_repr_or_str() -> None:
    security = KafkaSecurity.from_conf(scram(), {PASSWORD_ENV: "hunter2-secret"})
    for text in (repr(security), str(security), security.describe()):
        assert "hunter2-secret" not in text
    assert "alice" in str(security)


def test_password_file_errors(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(ValueError, match=f"tidemark.kafka.sasl.password.file: file {missing} does not exist"):
        KafkaSecurity.from_conf({**scram(), "tidemark.kafka.sasl.password.file": str(missing)}, {})
    with pytest.raises(ValueError, match=f"tidemark.kafka.sasl.password.file: {tmp_path} is not a file"):
        KafkaSecurity.from_conf({**scram(), "tidemark.kafka.sasl.password.file": str(tmp_path)}, {})
    empty = tmp_path / "empty"
    empty.write_text("")
    with pytest.raises(ValueError, match="is empty"):
        KafkaSecurity.from_conf({**scram(), "tidemark.kafka.sasl.password.file": str(empty)}, {})
    given = tmp_path / "pw"
    given.write_text("x")
    with pytest.raises(ValueError, match="given twice"):
        KafkaSecurity.from_conf({**scram(), "tidemark.kafka.sasl.password.file": str(given)}, {PASSWORD_ENV: "y"})


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_unreadable_files_are_named(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.write_text("x")
    locked.chmod(0)
    with pytest.raises(ValueError, match=f"tidemark.kafka.ssl.ca.location: file {locked} cannot be read"):
        KafkaSecurity.from_conf({**SSL, "tidemark.kafka.ssl.ca.location": str(locked)}, {})
    with pytest.raises(ValueError, match=f"tidemark.kafka.sasl.password.file: file {locked} cannot be read"):
        KafkaSecurity.from_conf({**scram(), "tidemark.kafka.sasl.password.file": str(locked)}, {})


def test_a_missing_ssl_file_names_key_and_path(tmp_path: Path) -> None:
    for key in ("tidemark.kafka.ssl.ca.location",):
        with pytest.raises(ValueError, match=f"{key}: file {tmp_path}/ca.pem does not exist"):
            KafkaSecurity.from_conf({**SSL, key: str(tmp_path / "ca.pem")}, {})
    cert = _pem(tmp_path, "tls.crt")
    with pytest.raises(
        ValueError, match=f"tidemark.kafka.ssl.key.location: file {tmp_path}/missing.key does not exist"
    ):
        KafkaSecurity.from_conf(
            {
                **SSL,
                "tidemark.kafka.ssl.certificate.location": cert,
                "tidemark.kafka.ssl.key.location": str(tmp_path / "missing.key"),
            },
            {},
        )
    with pytest.raises(ValueError, match="needs both"):
        KafkaSecurity.from_conf({**SSL, "tidemark.kafka.ssl.certificate.location": cert}, {})


@pytest.mark.parametrize(
    ("conf", "message"),
    [
        ({"tidemark.kafka.security.protocol": "TLS"}, r"tidemark.kafka.security.protocol: unknown protocol 'TLS'"),
        ({**scram(), "tidemark.kafka.sasl.mechanism": "GSSAPI"}, r"sasl.mechanism: unknown mechanism 'GSSAPI'"),
        ({"tidemark.kafka.security.protocol": "SASL_SSL"}, r"needs tidemark.kafka.sasl.mechanism"),
        (
            {"tidemark.kafka.security.protocol": "SASL_SSL", "tidemark.kafka.sasl.mechanism": "SCRAM-SHA-256"},
            r"SCRAM-SHA-256 needs tidemark.kafka.sasl.username",
        ),
        ({**scram()}, r"needs a password: set \$TIDEMARK_KAFKA_SASL_PASSWORD"),
        ({"tidemark.kafka.sasl.mechanism": "PLAIN"}, r"security.protocol is PLAINTEXT, which does not use SASL"),
        ({"tidemark.kafka.ssl.ca.location": "/x"}, r"security.protocol is PLAINTEXT, which does not use TLS"),
        ({"tidemark.kafka.ssl.ca.locaton": "/x"}, r"unknown Kafka setting\(s\) tidemark.kafka.ssl.ca.locaton"),
        # a family misspelt was not looked at: the protocol stayed PLAINTEXT without a word
        (
            {"tidemark.kafak.security.protocol": "SSL"},
            r"unknown Kafka setting\(s\) tidemark.kafak.security.protocol "
            r"\(did you mean tidemark.kafka.security.protocol\?\)",
        ),
        # a key in capitals was named without the key meant
        (
            {"tidemark.kafka.SSL.CA.Location": "/x"},
            r"unknown Kafka setting\(s\) tidemark.kafka.SSL.CA.Location "
            r"\(did you mean tidemark.kafka.ssl.ca.location\?\)",
        ),
        (
            {"tidemark.ssl.ca.location": "/x"},
            r"unknown Kafka setting\(s\) tidemark.ssl.ca.location \(did you mean tidemark.kafka.ssl.ca.location\?\)",
        ),
        (
            {**SSL, "tidemark.kafka.ssl.endpoint.identification.algorithm": "yes"},
            r"endpoint.identification.algorithm: 'yes' is neither",
        ),
        (
            {"tidemark.kafka.security.protocol": "SASL_SSL", "tidemark.kafka.sasl.mechanism": "OAUTHBEARER"},
            r"OAUTHBEARER needs tidemark.kafka.sasl.oauthbearer.method=aws_msk_iam",
        ),
    ],
)
def test_bad_settings_say_what_is_wrong(conf: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        KafkaSecurity.from_conf(conf, {})


MSK = {
    "tidemark.kafka.security.protocol": "SASL_SSL",
    "tidemark.kafka.sasl.mechanism": "OAUTHBEARER",
    "tidemark.kafka.sasl.oauthbearer.method": "aws_msk_iam",
}


def test_msk_iam_needs_a_region_and_the_signer(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match=r"needs tidemark.kafka.aws.region \(or \$AWS_REGION\)"):
        KafkaSecurity.from_conf(MSK, {})
    assert KafkaSecurity.from_conf(MSK, {"AWS_REGION": "eu-west-1"}).aws_region == "eu-west-1"
    monkeypatch.setitem(sys.modules, "aws_msk_iam_sasl_signer", None)  # as if tidemark[msk] were not installed
    with pytest.raises(ValueError, match=r"install tidemark\[msk\]"):
        KafkaSecurity.from_conf({**MSK, "tidemark.kafka.aws.region": "eu-west-1"}, {})


def test_msk_iam_token_provider_signs_a_token_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAIOSFODNN7EXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    security = KafkaSecurity.from_conf({**MSK, "tidemark.kafka.aws.region": "us-east-1"}, {})
    config = security.kafka_config()
    assert config["sasl_mechanism"] == "OAUTHBEARER"
    provider = config["sasl_oauth_token_provider"]
    assert isinstance(provider, MskIamTokenProvider)
    token = provider.token()
    assert token == provider.token(), "a token is reused until it nears its expiry"
    assert set(token) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")  # base64url
    url = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)
    assert urllib.parse.urlsplit(url).hostname == "kafka.us-east-1.amazonaws.com"
    assert query["Action"] == ["kafka-cluster:Connect"]
    assert query["X-Amz-Credential"][0].startswith("AKIAIOSFODNN7EXAMPLE/")
    assert secret not in token
    assert secret not in url
    assert secret not in repr(security)
    assert "sasl_plain_password" not in config


def test_an_encrypted_client_key_is_refused_at_start(tmp_path: Path) -> None:
    """OpenSSL asked for the key's passphrase on the terminal when the service connected (a
    process with a terminal waited for ever; one without failed naming no file)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = tmp_path / "encrypted.key"
    key.write_bytes(
        ec.generate_private_key(ec.SECP256R1()).private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"passphrase"),
        )
    )
    conf = {**SSL, "tidemark.kafka.ssl.certificate.location": _pem(tmp_path, "tls.crt")}
    with pytest.raises(ValueError, match=f"tidemark.kafka.ssl.key.location: {key} is an encrypted private key"):
        KafkaSecurity.from_conf({**conf, "tidemark.kafka.ssl.key.location": str(key)}, {})


def test_a_misspelt_environment_variable_is_refused() -> None:
    """``TIDEMARK_KAFKA_SECURITY_PROTOCL=SASL_SSL`` silently left the protocol at PLAINTEXT."""
    with pytest.raises(ValueError, match=r"unknown Kafka environment variable\(s\) TIDEMARK_KAFKA_SECURITY_PROTOCL"):
        KafkaSecurity.from_conf({}, {"TIDEMARK_KAFKA_SECURITY_PROTOCL": "SASL_SSL"})
    # the services' bootstrap default shares the prefix, and is no security setting
    assert KafkaSecurity.from_conf({}, {"TIDEMARK_KAFKA_BOOTSTRAP": "k:9092"}).protocol == "PLAINTEXT"


def test_tls_files_openssl_cannot_use_are_refused_at_start(tmp_path: Path) -> None:
    """A key not matching its certificate, a file that is no PEM key or certificate, or a key given
    as the CA: the service started and failed every handshake, each second, naming no setting."""
    ca, cert, key = (_pem(tmp_path, name) for name in ("ca.crt", "tls.crt", "tls.key"))
    (tmp_path / "elsewhere").mkdir()
    other = issue(make_ca(tmp_path / "elsewhere", "ca"), tmp_path, "other", client=True)
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a PEM file\n")

    def refused(ca_file: str, cert_file: str, key_file: str) -> str:
        with pytest.raises(ValueError, match=r"^tidemark\.kafka\.ssl\.") as caught:
            KafkaSecurity.from_conf(
                {
                    **SSL,
                    "tidemark.kafka.ssl.ca.location": ca_file,
                    "tidemark.kafka.ssl.certificate.location": cert_file,
                    "tidemark.kafka.ssl.key.location": key_file,
                },
                {},
            )
        return str(caught.value)

    assert refused(ca, cert, str(other.key)) == (
        f"tidemark.kafka.ssl.key.location: the key in {other.key} does not belong to the certificate in "
        f"tidemark.kafka.ssl.certificate.location={cert}"
    )
    assert refused(ca, cert, str(garbage)).startswith(
        f"tidemark.kafka.ssl.key.location: file {garbage} holds no PEM private key OpenSSL can load"
    )
    assert refused(ca, key, key).startswith(
        f"tidemark.kafka.ssl.certificate.location: file {key} holds no PEM certificate"
    )
    assert refused(str(tmp_path / "ca.key"), cert, key) == (
        f"tidemark.kafka.ssl.ca.location: file {tmp_path / 'ca.key'} holds no PEM CA certificate OpenSSL can load: "
        "[X509: NO_CERTIFICATE_OR_CRL_FOUND] no certificate or crl found"
    )
    # the files that belong together are taken
    assert KafkaSecurity.from_conf(
        {
            **SSL,
            "tidemark.kafka.ssl.ca.location": ca,
            "tidemark.kafka.ssl.certificate.location": str(other.cert),
            "tidemark.kafka.ssl.key.location": str(other.key),
        },
        {},
    ).key_location == str(other.key)


def test_other_tidemark_keys_are_not_taken_for_misspelt_kafka_keys() -> None:
    """Keys of other families pass, near as some are to tidemark.kafka.* once spelt out."""
    conf = {
        "tidemark.s3.region": "eu-west-1",
        "tidemark.s3.endpoint": "http://127.0.0.1:9000",
        "tidemark.read.split.bytes": "1048576",
        "tidemark.write.parallelism": "4",
        "tidemark.writer.coordinator.tls.ca.location": "/x",
        "tidemark.clean.archive.enabled": "true",
        "tidemark.index.broadcast.max.keys": "10",
    }
    assert KafkaSecurity.from_conf(conf, {}).protocol == "PLAINTEXT"
