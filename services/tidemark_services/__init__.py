"""tidemark's long-running services: the cleaner and the archiver. They only wire the shared
library (``tidemark``) to Kafka, HTTP and Prometheus; every decision is the library's."""

from typing import NoReturn

from tidemark.cli import run_installed


# the commands (pyproject's scripts), named apart from the modules they load (Kafka's and
# Prometheus's clients)
def run_cleaner() -> NoReturn:
    run_installed("tidemark-cleaner", "tidemark_services.cleaner", "services")


def run_archiver() -> NoReturn:
    run_installed("tidemark-archiver", "tidemark_services.archiver", "services")


def run_writer_coordinator() -> NoReturn:
    run_installed("tidemark-writer-coordinator", "tidemark_services.writer_coordinator", "services")
