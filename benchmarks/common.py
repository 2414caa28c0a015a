"""What every benchmark shares: a result beside its anchor, alternating best-of timing, and the
report (a table on stdout, JSON in ``benchmarks/.data/``)."""

from __future__ import annotations

import gc
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tidemark.bulk import collector_paused

BENCH_DIR = Path(__file__).resolve().parent
DATA_DIR = BENCH_DIR / ".data"


@dataclass
class Result:
    """One measurement: the tidemark figure, its anchor, their ratio and the goal it must meet."""

    name: str
    goal_text: str
    tidemark_label: str
    tidemark_value: float
    anchor_label: str
    anchor_value: float
    unit: str
    ratio: float
    goal: float
    details: dict[str, Any] = field(default_factory=dict)

    #: a goal on time spent (tidemark / anchor must stay under it) rather than on throughput
    lower_is_better: bool = False

    @property
    def passed(self) -> bool:
        return self.ratio <= self.goal if self.lower_is_better else self.ratio >= self.goal


# --- timing ------------------------------------------------------------------------------------


@contextmanager
def _quiet_gc() -> Iterator[None]:
    """Collect first, then keep the cyclic collector out of the timed region (as ``timeit`` does),
    so a collection triggered by one side's garbage is not billed to the other."""
    gc.collect()
    with collector_paused():
        yield


def _time_once(run: Callable[[], int]) -> tuple[float, int]:
    with _quiet_gc():
        start = time.perf_counter()
        n = run()
        elapsed = time.perf_counter() - start
    return elapsed, n


def best_of_alternating(
    tidemark: Callable[[], int],
    anchor: Callable[[], int],
    reps: int,
    after: Callable[[], None] | None = None,
) -> tuple[float, float, int, int]:
    """Best (minimum) seconds of ``reps`` runs of each side, run alternately so a burst of noise
    hits both; also the count each side's last run returned. ``after`` runs untimed after every
    run (to clean up what a run wrote)."""
    best_t = best_a = float("inf")
    n_t = n_a = 0
    for _ in range(reps):
        elapsed, n_t = _time_once(tidemark)
        best_t = min(best_t, elapsed)
        if after is not None:
            after()
        elapsed, n_a = _time_once(anchor)
        best_a = min(best_a, elapsed)
        if after is not None:
            after()
    return best_t, best_a, n_t, n_a


# --- report ------------------------------------------------------------------------------------


def _figure(value: float, unit: str) -> str:
    if unit == "records/s":
        return f"{value:,.0f} rec/s"
    if unit == "MB":
        return f"{value:,.1f} MB"
    if value < 1.0:
        return f"{value * 1000:.2f} ms"
    return f"{value:.3f} s"


def ratio_text(result: Result) -> str:
    return f"{result.ratio:.1f}x" if result.goal >= 10 else f"{result.ratio:.3f}"


def print_table(results: list[Result]) -> None:
    header = ("measurement", "tidemark", "anchor", "ratio", "goal", "result")
    rows = [
        (
            r.name,
            _figure(r.tidemark_value, r.unit),
            _figure(r.anchor_value, r.unit),
            ratio_text(r),
            r.goal_text,
            "PASS" if r.passed else "MISS",
        )
        for r in results
    ]
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    line = "  ".join("-" * w for w in widths)
    print(line)
    for i, row in enumerate((header, *rows)):
        cells = (c.rjust(w) if col == 3 else c.ljust(w) for col, (c, w) in enumerate(zip(row, widths, strict=True)))
        print("  ".join(cells).rstrip())
        if i == 0:
            print(line)
    print(line)
    for r in results:
        print(f"{r.name}: tidemark = {r.tidemark_label}; anchor = {r.anchor_label}")


def write_json(
    name: str, results: list[Result], config: dict[str, Any], versions: dict[str, str], output: Path
) -> None:
    payload = {
        "benchmark": name,
        "time": datetime.now(UTC).isoformat(timespec="seconds"),
        "config": config,
        "python": sys.version.split()[0],
        **versions,
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "results": [{**asdict(r), "passed": r.passed} for r in results],
    }
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(payload, indent=2) + "\n")


def start_moto(bucket: str = "bench") -> tuple[Any, str]:
    """A moto S3 server over HTTP on a free local port, with ``bucket`` made: (server, endpoint);
    ``server.stop()`` when done. Fake credentials, as the tests use."""
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
    }.items():
        os.environ.setdefault(name, value)
    import boto3
    from moto.server import ThreadedMotoServer
    from tests.support.processes import free_port

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
    return server, endpoint


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (nearest rank, no interpolation)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]
