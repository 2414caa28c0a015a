"""The ``tidemark`` command line."""

from __future__ import annotations

import os
import sys
from typing import NoReturn

#: the exit status of a command stopped by Ctrl-C (SIGINT), as a shell gives it
EXIT_INTERRUPTED = 130


def run() -> NoReturn:
    """The ``tidemark`` command. Its modules (pyarrow, boto3, the commands) take a moment to load:
    a Ctrl-C meanwhile ends as one later does, with one line and exit 130, not a traceback."""
    try:
        from tidemark.cli.main import run as run_command
    except KeyboardInterrupt:
        sys.stderr.write("tidemark: interrupted.\n")
        sys.stderr.flush()
        os._exit(EXIT_INTERRUPTED)
    run_command()
