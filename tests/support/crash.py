"""Kill a real tidemark process at a chosen storage mutation, for crash-safety tests.

:func:`run` and :func:`start` launch ``python -m tests.support.crash`` in a child process. The
child replaces the mutating methods (``write``, ``create_if_absent``, ``append``, ``delete``) of
:class:`~tidemark.storage.local.LocalStorage` and of :class:`~tidemark.storage.s3.S3Storage` (which
has no ``append``) with wrappers, then calls an entry point's
``main(argv)`` exactly as its console script would (``tidemark``, ``tidemark-cleaner``,
``tidemark-archiver``). The library has no hook for this: the wrapping lives here, in the child.
``tidemark.storage.s3`` (and boto3) is wrapped when the child first imports it, so a child that
works on local tables does not pay for loading boto3.

Each wrapper appends one line per mutating call to a log file (``op<TAB>path<TAB>ok|error``, the
path relative to the storage's root, whichever the storage class,
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
import importlib.abc
import importlib.util
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

#: the methods of a Storage that change storage (each class wraps those it defines itself)
MUTATING = ("write", "create_if_absent", "append", "delete")
#: module → the Storage class in it whose mutating methods the child wraps
STORAGE_CLASSES = {"tidemark.storage.local": "LocalStorage", "tidemark.storage.s3": "S3Storage"}
#: console script → module whose ``main(argv)`` it runs (as in pyproject's [project.scripts])
ENTRY_POINTS = {
    "tidemark": "tidemark.cli.main",
    "tidemark-cleaner": "tidemark_services.cleaner",
    "tidemark-archiver": "tidemark_services.archiver",
}
REPO_ROOT = Path(__file__).resolve().parents[2]

#: ``--conf`` for a command killed while it holds the table lock: the command run after it takes
#: the lock over once the lease expires, which at the default (60 s) a test would wait out
SHORT_LEASE = ("--conf", "hoodie.write.lock.storage.validity.timeout.secs=1")


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


def run(
    entry: str,
    argv: Sequence[str],
    log: Path,
    kill: KillAt | None = None,
    timeout_s: float = 60,
    env: Mapping[str, str] | None = None,
) -> Run:
    """Run the entry point to its end (or its kill) and return what it did. ``env``: the child's
    environment (default: this process's), e.g. the credentials of an S3 endpoint."""
    log.unlink(missing_ok=True)
    done = subprocess.run(
        command(entry, argv, log, kill),
        cwd=REPO_ROOT,
        env=None if env is None else dict(env),
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
    """Wrap the mutating methods of every class in :data:`STORAGE_CLASSES`: at once where its module
    is loaded already, else when the child first imports it."""
    seen = 0  # one count for every storage class: the n-th mutation is the n-th of the process

    def record(op: str, path: str, ok: bool) -> None:
        os.write(log_fd, f"{op}\t{path}\t{'ok' if ok else 'error'}\n".encode())

    def die() -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    def wrap(op: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(self: object, path: str, *args: Any, **kwargs: Any) -> Any:
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

    def wrap_class(module: ModuleType) -> None:
        cls = getattr(module, STORAGE_CLASSES[module.__name__])
        for op in MUTATING:
            if op in vars(cls):  # what it inherits (S3Storage's append) changes nothing
                setattr(cls, op, wrap(op, vars(cls)[op]))

    for name in STORAGE_CLASSES:
        if name in sys.modules:
            wrap_class(sys.modules[name])
        else:
            sys.meta_path.insert(0, _AfterImport(name, wrap_class))


class _AfterImport(importlib.abc.MetaPathFinder):
    """Calls ``then(module)`` once the module ``name`` has been executed by its first import."""

    def __init__(self, name: str, then: Callable[[ModuleType], None]) -> None:
        self.name = name
        self.then = then

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)  # the other finders locate the module; this one is done
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        execute = spec.loader.exec_module  # this module's own loader: patching it touches no other

        def exec_module(module: ModuleType) -> None:
            execute(module)
            self.then(module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


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
