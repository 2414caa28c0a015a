"""The ``tidemark`` command as a user runs it: a child process of this interpreter, to its end."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path


def tidemark(
    *args: str, env: Mapping[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """``tidemark ARGS``, its output captured; ``env`` is added to this process's environment."""
    return subprocess.run(
        [sys.executable, "-m", "tidemark.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        check=False,
    )


def listing(root: Path) -> dict[str, str]:
    """Every file and folder under ``root``, with a digest of each file's bytes: what a refused
    command must leave as it found it."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        for p in sorted(root.rglob("*"))
    }
