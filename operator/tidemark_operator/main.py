"""Entry point of ``tidemark-operator`` (filled in by the operator issue)."""

from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    raise SystemExit("tidemark-operator: not built yet")
