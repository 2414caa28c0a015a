"""The tidemark operator: one ``HudiTable`` resource per Hudi table; table services scheduled per table."""

from typing import NoReturn

from tidemark.cli import run_installed


def run() -> NoReturn:
    """The ``tidemark-operator`` command (its modules load kopf and Kafka's client)."""
    run_installed("tidemark-operator", "tidemark_operator.main", "operator")
