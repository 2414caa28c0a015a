"""Entry point of the ``tidemark`` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from tidemark import __version__
from tidemark.cli import events, log, services, table
from tidemark.errors import TidemarkError, WriteConflictError

#: the exit status of a write that lost a conflict with another writer (and was rolled back)
EXIT_WRITE_CONFLICT = 3


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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.run(args)
        return code
    except WriteConflictError as e:
        print(f"tidemark: error: {str(e).splitlines()[0]}", file=sys.stderr)
        return EXIT_WRITE_CONFLICT
    except TidemarkError as e:
        print(f"tidemark: error: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `tidemark log inspect x | head`
        return 0


if __name__ == "__main__":
    sys.exit(main())
