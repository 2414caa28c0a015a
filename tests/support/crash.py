"""Kill a real tidemark process at a chosen storage mutation, for crash-safety tests.

:func:`run` and :func:`start` launch ``python -m tests.support.crash`` in a child process. The
child replaces :class:`~tidemark.storage.local.LocalStorage`'s mutating methods (``write``,
``create_if_absent``, ``append``, ``delete``) with wrappers, then calls an entry point's
``main(argv)`` exactly as its console script would (``tidemark``, ``tidemark-cleaner``,
``tidemark-archiver``). The library has no hook for this: the wrapping lives here, in the child.

Each wrapper appends one line per mutating call to a log file (``op<TAB>path<TAB>ok|error``,
written with ``os.write`` so it reaches the kernel at once and survives the kill), and when the
call is the ``n``-th one :attr:`KillAt.match` finds, the child sends itself SIGKILL:
``before`` the call runs (it neither happens nor is logged) or ``after`` it (logged, then killed).
A run without a :class:`KillAt` records every mutation and exits normally: that is how a test
learns how many mutating calls an operation makes and which call is which step.

Command line of the child::

    python -m tests.support.crash --log FILE [--kill-at N --when before|after --match TEXT] \\
        ENTRY [ARG ...]
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

#: the methods of LocalStorage that change storage
MUTATING = ("write", "create_if_absent", "append", "delete")
#: console script → module whose ``main(argv)`` it runs (as in pyproject's [project.scripts])
ENTRY_POINTS = {
    "tidemark": "tidemark.cli.main",
    "tidemark-cleaner": "tidemark_services.cleaner",
    "tidemark-archiver": "tidemark_services.archiver",
}
REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class KillAt:
    """SIGKILL at the ``n``-th (from 1) mutating call whose ``"op path"`` ``match`` finds (a regular
    expression; empty: every call counts)."""

    n: int
    when: Literal["before", "after"] = "after"
    match: str = ""

    def __str__(self) -> str:
        where = f" matching {self.match!r}" if self.match else ""
        return f"{self.when} mutation {self.n}{where}"


@dataclass(frozen=True)
class Mutation:
    op: str
    path: str
    ok: bool = True

    def __str__(self) -> str:
        return f"{self.op} {self.path}"


@dataclass(frozen=True)
class Run:
    returncode: int
    #: the mutating calls that ran, in order (a call killed ``before`` is not among them)
    mutations: tuple[Mutation, ...]
    stdout: str
    stderr: str

    @property
    def killed(self) -> bool:
        return self.returncode == -signal.SIGKILL


def command(entry: str, argv: Sequence[str], log: Path, kill: KillAt | None = None) -> list[str]:
    cmd = [sys.executable, "-m", "tests.support.crash", "--log", str(log)]
    if kill is not None:
        cmd += ["--kill-at", str(kill.n), "--when", kill.when, "--match", kill.match]
    return [*cmd, entry, *argv]


def read_log(log: Path) -> tuple[Mutation, ...]:
    if not log.exists():
        return ()
    found = []
    for line in log.read_text().splitlines():
        op, path, status = line.split("\t")
        found.append(Mutation(op, path, status == "ok"))
    return tuple(found)


def run(entry: str, argv: Sequence[str], log: Path, kill: KillAt | None = None, timeout_s: float = 60) -> Run:
    """Run the entry point to its end (or its kill) and return what it did."""
    log.unlink(missing_ok=True)
    done = subprocess.run(
        command(entry, argv, log, kill),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    return Run(done.returncode, read_log(log), done.stdout, done.stderr)


def start(entry: str, argv: Sequence[str], log: Path, kill: KillAt | None = None) -> subprocess.Popen[bytes]:
    """Start a long-running entry point (a service); it dies with the test process. Its output
    goes to ``log`` with the suffix ``.out``."""
    from tests.support.processes import die_with_parent  # not imported in the child

    log.unlink(missing_ok=True)
    with log.with_suffix(".out").open("wb") as out:
        return subprocess.Popen(
            command(entry, argv, log, kill),
            cwd=REPO_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent,
        )


# --- the child ------------------------------------------------------------------------------------


def _install(log_fd: int, kill: KillAt | None) -> None:
    from tidemark.storage.local import LocalStorage

    seen = 0

    def record(op: str, path: str, ok: bool) -> None:
        os.write(log_fd, f"{op}\t{path}\t{'ok' if ok else 'error'}\n".encode())

    def die() -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    def wrap(op: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(self: LocalStorage, path: str, *args: Any, **kwargs: Any) -> Any:
            nonlocal seen
            hit = False
            if kill is not None and re.search(kill.match, f"{op} {path}"):
                seen += 1
                hit = seen == kill.n
            if hit and kill is not None and kill.when == "before":
                die()
            try:
                result = original(self, path, *args, **kwargs)
            except BaseException:
                record(op, path, False)
                if hit:
                    die()
                raise
            record(op, path, True)
            if hit:
                die()
            return result

        return wrapper

    for op in MUTATING:
        setattr(LocalStorage, op, wrap(op, getattr(LocalStorage, op)))


def _child(args: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.crash")
    parser.add_argument("--log", required=True)
    parser.add_argument("--kill-at", type=int, default=None)
    parser.add_argument("--when", choices=["before", "after"], default="after")
    parser.add_argument("--match", default="")
    parser.add_argument("entry", choices=sorted(ENTRY_POINTS))
    parser.add_argument("argv", nargs=argparse.REMAINDER)
    opts = parser.parse_args(args)
    kill = None if opts.kill_at is None else KillAt(opts.kill_at, opts.when, opts.match)
    log_fd = os.open(opts.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    _install(log_fd, kill)
    main: Callable[[list[str]], int] = importlib.import_module(ENTRY_POINTS[opts.entry]).main
    sys.argv = [opts.entry, *opts.argv]
    return main(list(opts.argv))


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1:]))
