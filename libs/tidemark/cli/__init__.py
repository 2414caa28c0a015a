"""The ``tidemark`` command line."""

from __future__ import annotations

import importlib
import os
import signal
import sys
from typing import NoReturn

#: the exit status of a command stopped by Ctrl-C (SIGINT), as a shell gives it
EXIT_INTERRUPTED = 130
#: the exit status of a command stopped by SIGTERM (128 + 15), as a shell gives it
EXIT_TERMINATED = 143
#: the first words of a stopped command's last line, by what stopped it
INTERRUPTED_LINE = "tidemark: interrupted."
TERMINATED_LINE = "tidemark: terminated (SIGTERM)."


def run() -> NoReturn:
    """The ``tidemark`` command. Its modules (pyarrow, boto3, the commands) take a moment to load:
    a Ctrl-C meanwhile ends as one later does, with one line and exit 130, not a traceback (a
    SIGTERM likewise, exit 143)."""
    from tidemark.errors import Terminated, raise_terminated

    signal.signal(signal.SIGTERM, raise_terminated)
    try:
        from tidemark.cli.main import run as run_command
    except KeyboardInterrupt as e:
        terminated = isinstance(e, Terminated)
        sys.stderr.write(f"{TERMINATED_LINE if terminated else INTERRUPTED_LINE}\n")
        sys.stderr.flush()
        os._exit(EXIT_TERMINATED if terminated else EXIT_INTERRUPTED)
    run_command()


def run_installed(prog: str, module: str, extra: str) -> NoReturn:
    """A service's command (``prog``): ``module``'s ``main()``, or, when a package the module
    needs is not installed (the service's extra, ``pip install 'tidemark[EXTRA]'``), one line
    naming it instead of an import's traceback."""
    from tidemark.errors import MissingExtraError

    try:
        main = importlib.import_module(module).main
    except ModuleNotFoundError as e:
        if (e.name or "").split(".")[0] in ("tidemark", "tidemark_services", "tidemark_operator"):
            raise  # tidemark itself broken: not a missing extra
        sys.stderr.write(f"{prog}: error: {MissingExtraError(prog, e.name, extra)}\n")
        sys.exit(1)
    sys.exit(main())
