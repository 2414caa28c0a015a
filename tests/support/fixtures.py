"""Access to the Apache Hudi fixtures (tables and log files written by Hudi's Spark writer).

They live outside the repository: ``$TIDEMARK_HUDI_FIXTURES``, else ``../shared/hudi-fixtures``
beside the checkout. Tests that need them skip, saying why, when they are absent.
"""

from __future__ import annotations

import os
import re
import zipfile
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]


def _where() -> Path:
    configured = os.environ.get("TIDEMARK_HUDI_FIXTURES")
    return Path(configured) if configured else REPO.parent / "shared" / "hudi-fixtures"


def fixtures_root() -> Path:
    """The fixtures' folder; the calling test is skipped, saying where it looked, when it is absent
    (call it inside tests: at import it would skip, or fail, a whole module)."""
    root = _where()
    if not root.is_dir():
        pytest.skip(f"Hudi fixtures not found at {root} (set TIDEMARK_HUDI_FIXTURES to their folder)")
    return root


def fixture_log_files() -> list[Path]:
    """The single log files under ``log_files/`` (empty list when fixtures are absent)."""
    return sorted((_where() / "log_files").glob("*/.*.log.*"))


def table_zips() -> list[Path]:
    """The fixture tables' zips, ``tables/<kind>/<name>.zip`` (empty list when fixtures are absent)."""
    return sorted((_where() / "tables").glob("*/*.zip"))


def extract_table(zip_path: Path, into: Path) -> Path:
    """Unzip a fixture table (without macOS resource forks) and return the table's base path."""
    with zipfile.ZipFile(zip_path) as zf:
        members = [m for m in zf.namelist() if not m.startswith("__MACOSX") and not m.endswith(".DS_Store")]
        zf.extractall(into, members)
    return into / zip_path.stem


# --- the SQL beside each fixture ---------------------------------------------------------------


def _split_top_level(text: str, brackets: str = "()") -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    depth, quote, sep = 0, False, ","
    for ch in text:
        if ch == "'":
            quote = not quote
        elif not quote and ch in brackets[::2]:
            depth += 1
        elif not quote and ch in brackets[1::2]:
            depth -= 1
        if ch == sep and depth == 0 and not quote:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
    if "".join(current).strip():
        parts.append("".join(current).strip())
    return parts


def _scalar(token: str) -> Any:
    if token.startswith("'") and token.endswith("'"):
        return token[1:-1]
    if token in ("true", "false"):
        return token == "true"
    if re.fullmatch(r"-?\d+", token):
        return int(token)
    if re.fullmatch(r"-?\d+\.\d*", token):
        return float(token)
    return token  # CAST(...), ARRAY(...), STRUCT(...): kept as SQL text


def sql_statements(sql_path: Path) -> list[str]:
    text = re.sub(r"/\*.*?\*/", "", sql_path.read_text(), flags=re.S)
    text = "\n".join(line.split("--", 1)[0] for line in text.splitlines())
    return [s.strip() for s in text.split(";") if s.strip()]


def sql_columns(sql_path: Path) -> list[str]:
    """Column names of the CREATE TABLE, in order."""
    create = next(s for s in sql_statements(sql_path) if s.upper().startswith("CREATE TABLE"))
    body = create[create.index("(") + 1 :]
    depth, end = 1, 0
    for i, ch in enumerate(body):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0:
            end = i
            break
    return [col.split()[0] for col in _split_top_level(body[:end], brackets="()<>") if col]


def sql_inserts(sql_path: Path) -> list[list[dict[str, Any]]]:
    """Rows of each INSERT ... VALUES statement, as dicts of column → value (scalars parsed,
    other expressions kept as their SQL text)."""
    columns = sql_columns(sql_path)
    result = []
    for statement in sql_statements(sql_path):
        if not statement.upper().startswith("INSERT INTO"):
            continue
        values = statement[statement.upper().index("VALUES") + len("VALUES") :]
        rows = []
        for row in _split_top_level(values):
            fields = _split_top_level(row.strip()[1:-1])
            rows.append(dict(zip(columns, (_scalar(f) for f in fields), strict=True)))
        result.append(rows)
    return result


def sql_primary_key(sql_path: Path) -> list[str]:
    create = next(s for s in sql_statements(sql_path) if s.upper().startswith("CREATE TABLE"))
    m = re.search(r"primaryKey\s*=\s*'([^']+)'", create)
    assert m, f"no primaryKey in {sql_path}"
    return m[1].split(",")


def sql_model(sql_path: Path) -> dict[tuple[Any, ...], dict[str, Any]]:
    """The rows the SQL leaves in the table, by primary key: INSERTs upsert (the tables have a
    primary key), ``UPDATE t SET c = v WHERE c2 = 'x'`` and ``DELETE ... WHERE c IN (...)``
    apply in order. Only the statement shapes the fixtures use are understood."""
    key_cols = sql_primary_key(sql_path)
    inserts = iter(sql_inserts(sql_path))
    rows: dict[tuple[Any, ...], dict[str, Any]] = {}
    for statement in sql_statements(sql_path):
        upper = statement.upper()
        if upper.startswith("INSERT INTO"):
            for row in next(inserts):
                rows[tuple(row[k] for k in key_cols)] = row
        elif upper.startswith("UPDATE"):
            m = re.search(r"SET\s+(\w+)\s*=\s*([^\s]+)\s+WHERE\s+(\w+)\s*=\s*'([^']*)'", statement, re.S | re.I)
            assert m, f"unsupported UPDATE in {sql_path}: {statement}"
            column, value, where_col, where_val = m.groups()
            for row in rows.values():
                if row[where_col] == where_val:
                    row[column] = _scalar(value)
        elif upper.startswith("DELETE"):
            m = re.search(r"WHERE\s+(\w+)\s+in\s*\(([^)]*)\)", statement, re.S | re.I)
            assert m, f"unsupported DELETE in {sql_path}: {statement}"
            values = {_scalar(v.strip()) for v in m[2].split(",")}
            rows = {k: r for k, r in rows.items() if r[m[1]] not in values}
    return rows
