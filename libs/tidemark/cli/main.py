"""Entry point of the ``tidemark`` command."""

from __future__ import annotations

import argparse
import atexit
import contextlib
import io
import logging
import os
import signal
import sys
import traceback
from collections.abc import Sequence
from typing import NoReturn

from tidemark import __version__
from tidemark.cli import (
    EXIT_INTERRUPTED,
    EXIT_TERMINATED,
    INTERRUPTED_LINE,
    TERMINATED_LINE,
    events,
    log,
    services,
    table,
)
from tidemark.cli.render import holds_unicode
from tidemark.config import check_switches, unread_keys
from tidemark.errors import (
    TidemarkError,
    UsageError,
    WriteConflictError,
    raise_terminated,
    raised_by_interrupt,
    raised_by_sigterm,
)

#: the exit status of a usage error, argparse's
EXIT_USAGE = 2
#: the exit status of a write that lost a conflict with another writer (and was rolled back)
EXIT_WRITE_CONFLICT = 3
#: what a stopped command that may have changed a table says after ``tidemark: interrupted.`` (or terminated)
LEFT_BEHIND = (
    "A write that had started was rolled back (else the next write rolls it back "
    "once its heartbeat expires); a compaction, clean or archival left pending is finished by its next run; "
    "a restore left unfinished, by running it again (writes are refused until then)"
)
#: the commands that only read: their Ctrl-C leaves nothing to say about a table
READ_ONLY_COMMANDS = frozenset({"log", "table", "timeline", "events"})


class CommandInterrupted(KeyboardInterrupt):
    """A Ctrl-C (or SIGTERM) that stopped ``command``."""

    def __init__(self, command: str) -> None:
        super().__init__(command)
        self.command = command

    @property
    def message(self) -> str:
        return interrupted_message(self, read_only=self.command in READ_ONLY_COMMANDS)


def interrupted_message(error: BaseException, read_only: bool = False) -> str:
    """The one line a command stopped by ``error`` (a Ctrl-C or a SIGTERM) ends with."""
    said = TERMINATED_LINE if raised_by_sigterm(error) else INTERRUPTED_LINE
    return said if read_only else f"{said} {LEFT_BEHIND}"


#: the loggers py4j logs on; a filter on a logger applies to its own records only, not to those
#: its children hand up, so each gets its own
PY4J_LOGGERS = ("py4j.java_gateway", "py4j.clientserver")


class _Py4JInterruptNoise(logging.Filter):
    """Drops py4j's logs of a Ctrl-C (or SIGTERM) that lands while Python waits on the JVM: PySpark's
    own SIGINT handler calls the JVM from inside that wait, and py4j logs both failures with their
    tracebacks (some fifty lines) above the one line that says the command was interrupted."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.exc_info:
            return True
        error: BaseException | None = record.exc_info[1]
        while error is not None:
            if isinstance(error, KeyboardInterrupt) or "reentrant call" in str(error):
                return False
            error = error.__cause__ or error.__context__
        return True


def quiet_py4j_interrupt_noise() -> None:
    """Puts :class:`_Py4JInterruptNoise` on py4j's loggers (once)."""
    for name in PY4J_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _Py4JInterruptNoise) for f in logger.filters):
            logger.addFilter(_Py4JInterruptNoise())


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tidemark", description="Apache Hudi table services, Merge-On-Read and copy-on-write (table version 6)."
    )
    parser.add_argument("--version", action="version", version=f"tidemark {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    log.add_parser(sub)
    table.add_parsers(sub)
    services.add_parsers(sub)
    events.add_parser(sub)
    _name_own_parsers(parser)
    return parser


def _name_own_parsers(parser: argparse.ArgumentParser) -> None:
    """Sets ``parser`` as a default of every (sub)command's parser, the innermost one winning, so
    that an error is reported with the usage of the command it is about."""
    parser.set_defaults(parser=parser)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command in action.choices.values():
                _name_own_parsers(command)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    # argparse hands a subcommand's unknown arguments back to the top parser, whose error would
    # show `tidemark`'s usage: the command's own parser reports them
    args, extras = parser.parse_known_args(argv)
    if extras:
        args.parser.error(f"unrecognized arguments: {' '.join(extras)}")
    # a misspelt key would silently fall back to its default
    for key in unread_keys(dict(getattr(args, "conf", None) or ())):
        print(f"tidemark: warning: --conf {key}: tidemark reads no such key; ignored", file=sys.stderr)
    try:
        return _run_command(args)
    except BaseException as e:
        if raised_by_interrupt(e) and not isinstance(e, CommandInterrupted):
            raise CommandInterrupted(args.command) from e
        raise


def _run_command(args: argparse.Namespace) -> int:
    try:
        # a bad switch is refused by every command, not only by those that read it
        check_switches(dict(getattr(args, "conf", None) or ()))
        # today's stdout: the commands' default is the one of when they were imported
        code: int = args.run(args, sys.stdout)
        return code
    except UsageError as e:
        # the command's own parser (build_parser sets it on each)
        command: argparse.ArgumentParser = args.parser
        command.print_usage(sys.stderr)
        print(f"{command.prog}: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except WriteConflictError as e:
        print(f"tidemark: error: {str(e).splitlines()[0]}", file=sys.stderr)
        return EXIT_WRITE_CONFLICT
    except TidemarkError as e:
        if raised_by_interrupt(e):  # a failure the Ctrl-C itself caused
            raise KeyboardInterrupt from e
        print(f"tidemark: error: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `tidemark log inspect x | head`
        return 0


def _stop_children() -> None:
    """SIGTERM to this process's children. PySpark starts Spark's JVM with SIGINT ignored, and
    one interrupted while it starts never reaches the point where it exits with its parent: it
    ran on, holding the command's output open (a caller reading it waited for good)."""
    if not os.path.isdir("/proc"):
        return
    me = os.getpid()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as stat:
                # the process's name (field 2) may hold spaces: the fields after its last ')'
                parent = int(stat.read().rsplit(")", 1)[1].split()[1])
            if parent == me:
                os.kill(int(entry.name), signal.SIGTERM)
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile, or not ours to signal


def run() -> NoReturn:
    """The ``tidemark`` command: :func:`main`, then the process ends without the teardown of
    native libraries' static state. A Parquet read leaves Arrow's thread pools behind, and their
    destruction at interpreter exit now and then aborts the process (``terminate called without
    an active exception``, exit 134, apache/arrow#34314) after the command succeeded: a pipeline
    would take that for a failure and run the command again. Python's own exit handlers still run;
    output is flushed first."""
    # a SIGTERM (a pod stopped) stops the command as a Ctrl-C does; as a container's PID 1,
    # one with no handler is dropped by the kernel, and the command ran on to its SIGKILL
    signal.signal(signal.SIGTERM, raise_terminated)
    quiet_py4j_interrupt_noise()
    if isinstance(sys.stdout, io.TextIOWrapper) and not holds_unicode(sys.stdout.encoding):
        # a character the encoding lacks prints escaped, as Python's stderr does, not as a traceback
        sys.stdout.reconfigure(errors="backslashreplace")
    try:
        code = main()
        # the command is done and has said so: a Ctrl-C (or SIGTERM) during the exit would only
        # print a traceback (or call the command interrupted)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    except SystemExit as e:  # argparse's errors and --help
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if e.code is not None and not isinstance(e.code, int):
            print(e.code, file=sys.stderr)
    except BaseException as e:
        if raised_by_interrupt(e):  # Ctrl-C or SIGTERM, or py4j's error raised while it handled one
            _stop_children()
            print(e.message if isinstance(e, CommandInterrupted) else interrupted_message(e), file=sys.stderr)
            code = EXIT_TERMINATED if raised_by_sigterm(e) else EXIT_INTERRUPTED
        else:
            traceback.print_exc()
            code = 1
    atexit._run_exitfuncs()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    run()
