"""The services' ``--help``: every option says what it is and its default, with the environment
variable that sets it, as the README gives them (the options had no help text at all)."""

from __future__ import annotations

import argparse

import pytest

from tidemark_services import writer_coordinator
from tidemark_services.main import build_parser


def helps(parser: argparse.ArgumentParser) -> dict[str, str]:
    return {a.option_strings[-1]: a.help or "" for a in parser._actions if a.option_strings}


@pytest.mark.parametrize("name", ["cleaner", "archiver", "writer-coordinator"])
def test_every_service_option_has_a_help_text_with_its_default(name: str) -> None:
    parser = writer_coordinator.build_parser() if name == "writer-coordinator" else build_parser(name)
    texts = helps(parser)
    assert [o for o, text in texts.items() if not text.strip()] == []
    assert "$TIDEMARK_KAFKA_BOOTSTRAP, else 127.0.0.1:9092" in texts["--bootstrap"]
    assert "tidemark.timeline)" in texts["--topic"]
    assert f"tidemark-{name})" in texts["--group"]
    assert "tidemark.timeline.dead-letter" in texts["--dead-letter-topic"]
    assert "$TIDEMARK_METRICS_PORT, else 9400" in texts["--metrics-port"]
    assert "$TIDEMARK_METRICS_HOST" in texts["--metrics-host"]
    assert "$TIDEMARK_S3_ENDPOINT" in texts["--s3-endpoint"]
    if name == "writer-coordinator":
        assert "$TIDEMARK_COORDINATOR_PORT, else 9500" in texts["--http-port"]
    else:
        assert "$TIDEMARK_SERVICE_TRIGGERS, else own" in texts["--triggers"]
