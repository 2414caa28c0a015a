"""Child processes of the tests (a broker, the services, a CLI to be killed): free loopback ports,
and a process that dies with the test run and keeps its output in a log file."""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (at the moment of asking)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_line(folder: str | Path, processes: int, seconds: float = 60) -> None:
    """In one of ``processes`` child processes: wait until all of them have reached this line
    (each leaves a ``ready.<pid>`` file in ``folder``), so that what follows races. A machine under
    load starts a pool's processes one after the other, and they never raced."""
    Path(folder, f"ready.{os.getpid()}").touch()
    deadline = time.monotonic() + seconds
    while len(list(Path(folder).glob("ready.*"))) < processes and time.monotonic() < deadline:
        time.sleep(0.005)


def accepts(port: int) -> bool:
    """Whether something accepts TCP connections on 127.0.0.1:``port``."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def die_with_parent() -> None:
    """In the child before exec (Linux): get SIGKILL when the test process dies, even by SIGKILL."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class ChildProcess:
    """One child process at a time, its output appended to :attr:`log_path`."""

    def __init__(self, name: str) -> None:
        self.name = name
        fd, log_name = tempfile.mkstemp(prefix=f"{name}-", suffix=".log")
        os.close(fd)
        self.log_path = Path(log_name)
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def launch(self, command: Sequence[str], env: Mapping[str, str] | None = None) -> None:
        self._log = self.log_path.open("ab")
        self._proc = subprocess.Popen(
            list(command),
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            preexec_fn=die_with_parent,
        )

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    @property
    def returncode(self) -> int | None:
        return None if self._proc is None else self._proc.poll()

    def signal_and_wait(self, sig: int, timeout_s: float) -> int | None:
        """Send ``sig``; SIGKILL if still running after ``timeout_s``. The exit status, or None
        when nothing ran."""
        proc, self._proc = self._proc, None
        code = None
        if proc is not None:
            if proc.poll() is None:
                proc.send_signal(sig)
                try:
                    proc.wait(timeout=timeout_s)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=5)
            code = proc.returncode
        self._close_log()
        return code

    def close(self) -> None:
        """Kill the process if it still runs and remove its log (idempotent): a test reads the
        log before, and the suite leaves nothing behind in the temporary directory."""
        self.signal_and_wait(signal.SIGKILL, 5)
        self.log_path.unlink(missing_ok=True)

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return f"--- {self.name} log ---\n" + self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return f"--- {self.name}: no log ---"
