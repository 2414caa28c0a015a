"""The chart's PrometheusRule alerts unit-tested with ``promtool test rules``: for every alert, series
that make it fire and series beside them that must not, evaluated before and after its ``for``.

The rules are the ones ``helm template`` renders (every optional part on), and the thresholds are
read from the same values, so a changed default or template is tested as rendered. The expected
alerts are compared by their labels; the annotations are left out of the rules given to the unit
test (promtool would compare their rendered text too) and checked by ``promtool check rules``,
which parses their templates.

promtool comes from Debian's ``prometheus`` package (the binary alone, put in .venv/bin); it is
looked for on PATH, then in .venv/bin; without it these tests skip and say how to get it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.test_chart import (
    COORDINATOR,
    FULL,
    NAMESPACE,
    OPERATOR,
    RELEASE,
    alert_rules,
    chart_values,
    merged,
    needs_helm,
    of_kind,
    render,
)


def find_promtool() -> str | None:
    found = shutil.which("promtool")
    if found:
        return found
    local = Path(sys.executable).parent / "promtool"
    return str(local) if os.access(local, os.X_OK) else None


PROMTOOL = find_promtool()
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None,
    reason="no promtool on PATH or in .venv/bin: `apt-get download prometheus` and extract usr/bin/promtool "
    "from it (dpkg-deb --fsys-tarfile prometheus_*.deb | tar -xO ./usr/bin/promtool > .venv/bin/promtool)",
)

JOB = {name: f"{RELEASE}-tidemark-{name}" for name in ("cleaner", "archiver", COORDINATOR, OPERATOR)}
ORDERS, CUSTOMERS = "s3://lake/warehouse/orders", "s3://lake/warehouse/customers"
RUNS = "tidemark_service_runs_total"
SKIPPED = "tidemark_events_skipped_total"


def series(component: str, name: str, values: str, **labels: str) -> dict[str, str]:
    """An input series as Prometheus scrapes it from ``component``'s Service."""
    inner = ", ".join(f'{k}="{v}"' for k, v in {"namespace": NAMESPACE, "job": JOB[component], **labels}.items())
    return {"series": f"{name}{{{inner}}}", "values": values}


def restarted(process: str, times: int) -> str:
    """The samples of a series over ``times`` processes, each ``process``'s samples then a minute
    unscraped while the pod restarts."""
    return " ".join(f"{process} stale" for _ in range(times))


def minutes(duration: str) -> int:
    """A Prometheus duration of minutes or hours in minutes."""
    match = re.fullmatch(r"([0-9]+)([mh])", duration)
    assert match, duration
    return int(match[1]) * (60 if match[2] == "h" else 1)


def case(
    alert: str, at: str, input_series: list[dict[str, str]], firing: list[dict[str, str]], quiet_at: str | None = None
) -> dict[str, Any]:
    """One promtool test: ``firing`` (the labels of each alert expected) at ``at``, and none at
    ``quiet_at`` (before its ``for`` has passed, or after the condition went away)."""
    expected = [{"exp_labels": {"severity": "warning", **labels}} for labels in firing]
    checks = [{"eval_time": at, "alertname": alert, "exp_alerts": expected}]
    if quiet_at is not None:
        checks.append({"eval_time": quiet_at, "alertname": alert, "exp_alerts": []})
    return {"interval": "1m", "input_series": input_series, "alert_rule_test": checks}


def unit_tests(values: dict[str, Any]) -> list[dict[str, Any]]:
    """A firing and a non-firing case for every alert, on either side of ``values``' thresholds."""
    rule = values["prometheusRule"]
    op = rule["operator"]
    since = rule["secondsSinceLastSuccess"]
    failing = minutes(rule["runsFailingFor"])
    cycles = (failing + 30) // 5  # 5-minute processes until past the alert's evaluation
    minutes_on = 5 * cycles
    recovered = failing - 10  # minutes of failures before a success: less than the alert waits
    archiver = {"service": "archiver"}
    spike = 2 * rule["writeConflictsIn15m"] // 15 + 1
    where = {"namespace": NAMESPACE}
    table = {"namespace": NAMESPACE, "resource": "lake/orders", "table": ORDERS}
    other = {"resource": "lake/customers", "table": CUSTOMERS}
    return [
        # no success for longer than the threshold, for 15 minutes: the cleaner, not the archiver
        case(
            "TidemarkServiceNoRecentSuccess",
            "20m",
            [
                series("cleaner", "tidemark_seconds_since_last_success", f"{since + 60}+60x30", service="cleaner"),
                series("archiver", "tidemark_seconds_since_last_success", "5+0x30", service="archiver"),
            ],
            [{**where, "service": "cleaner"}],
            quiet_at="10m",
        ),
        # a cleaner whose runs all fail, restarted by its liveness probe every 5 minutes: each
        # process counts from 0 again (its seconds since the last success too, so the alert above
        # never fires) and is not scraped for a minute. The archiver's runs failed for a while, then one
        # succeeded
        case(
            "TidemarkServiceRunsFailing",
            f"{failing + 15}m",
            [
                series("cleaner", RUNS, restarted("0+3x3", cycles), service="cleaner", outcome="error"),
                series("cleaner", RUNS, restarted("0+0x3", cycles), service="cleaner", outcome="ok"),
                series("cleaner", RUNS, restarted("0+0x3", cycles), service="cleaner", outcome="nothing-to-do"),
                series("archiver", RUNS, f"0+1x{recovered} {recovered}+0x{minutes_on}", **archiver, outcome="error"),
                series("archiver", RUNS, f"0+0x{recovered} 1+0x{minutes_on}", **archiver, outcome="ok"),
            ],
            [{**where, "service": "cleaner"}],
            quiet_at=f"{failing - 5}m",
        ),
        # a dead-lettered event fires for the next 15 minutes, then stops
        case(
            "TidemarkEventsDeadLettered",
            "10m",
            [
                series("cleaner", "tidemark_events_dead_lettered_total", "0 0 0 1+0x40", service="cleaner"),
                series("archiver", "tidemark_events_dead_lettered_total", "0+0x40", service="archiver"),
            ],
            [{**where, "service": "cleaner"}],
            quiet_at="40m",
        ),
        # a record committed past unhandled fires for the next 15 minutes, per reason, then stops
        case(
            "TidemarkEventsSkipped",
            "10m",
            [
                series("archiver", SKIPPED, "0 0 1+0x40", service="archiver", reason="unreadable"),
                series("archiver", SKIPPED, "0+0x40", service="archiver", reason="not-dead-lettered"),
                series("cleaner", SKIPPED, "0+0x40", service="cleaner", reason="unreadable"),
            ],
            [{**where, "service": "archiver", "reason": "unreadable"}],
            quiet_at="40m",
        ),
        case(
            "TidemarkAnnouncementsUnpublished",
            "15m",
            [
                series("archiver", "tidemark_announcements_unpublished", "2+0x30", service="archiver"),
                series("cleaner", "tidemark_announcements_unpublished", "0+0x30", service="cleaner"),
            ],
            [{**where, "service": "archiver"}],
            quiet_at="5m",
        ),
        # orders: blocked by a savepoint and nothing archived; customers: blocked at times but archived
        case(
            "TidemarkArchivalBlocked",
            "30m",
            [
                series("archiver", "tidemark_archive_blocked_total", "0+1x60", table=ORDERS, guard="savepoint"),
                series("archiver", "tidemark_archive_instants_total", "0+0x60", table=ORDERS),
                series("archiver", "tidemark_archive_blocked_total", "0+1x60", table=CUSTOMERS, guard="savepoint"),
                series("archiver", "tidemark_archive_instants_total", "0+3x60", table=CUSTOMERS),
            ],
            [{**where, "table": ORDERS, "guard": "savepoint"}],
            quiet_at="10m",
        ),
        # conflicts per minute: orders twice the threshold in 15 minutes (then none, and it stops),
        # customers under half of it
        case(
            "TidemarkWriteConflictSpike",
            "10m",
            [
                series(
                    COORDINATOR,
                    "tidemark_coordinator_conflicts_total",
                    f"0+{spike}x10 {10 * spike}+0x40",
                    table=ORDERS,
                    stage="early",
                ),
                series(
                    COORDINATOR,
                    "tidemark_coordinator_conflicts_total",
                    f"0+{rule['writeConflictsIn15m'] // 30}x40",
                    table=CUSTOMERS,
                    stage="commit",
                ),
            ],
            [{**where, "table": ORDERS}],
            quiet_at="40m",
        ),
        case(
            "TidemarkWritersFallingBackToDirectMarkers",
            "10m",
            [
                series(COORDINATOR, "tidemark_coordinator_fallbacks_total", "0 0 5+0x40", table=ORDERS),
                series(COORDINATOR, "tidemark_coordinator_fallbacks_total", "0+0x40", table=CUSTOMERS),
            ],
            [{**where, "table": ORDERS}],
            quiet_at="40m",
        ),
        # its one target stops answering: down once writerCoordinatorDownFor has passed
        case(
            "TidemarkWriterCoordinatorDown",
            "30m",
            [series(COORDINATOR, "up", "1+0x5 0+0x30")],
            [{**where, "job": JOB[COORDINATOR]}],
            quiet_at="5m",
        ),
        # and not scraped at all (absent)
        case("TidemarkWriterCoordinatorDown", "30m", [], [{**where, "job": JOB[COORDINATOR]}]),
        case(
            "TidemarkWriterCoordinatorDown",
            "30m",
            [series(COORDINATOR, "up", "1+0x40"), series(OPERATOR, "up", "0+0x40")],
            [],
        ),
        # the operator: a clean held back past the threshold; the archive of the same table is not
        case(
            "TidemarkHudiTableServiceOverdue",
            "10m",
            [
                series(
                    OPERATOR,
                    "tidemark_operator_request_overdue_seconds",
                    f"{op['overdueSeconds'] + 60}+60x30",
                    **table,
                    table_service="clean",
                ),
                series(
                    OPERATOR, "tidemark_operator_request_overdue_seconds", "0+0x30", **table, table_service="archive"
                ),
            ],
            [{**table, "table_service": "clean"}],
            quiet_at="3m",
        ),
        case(
            "TidemarkHudiTableArchivalBlocked",
            "10m",
            [
                series(
                    OPERATOR,
                    "tidemark_operator_archival_blocked_seconds",
                    f"{op['archivalBlockedSeconds'] + 60}+60x30",
                    **table,
                    guard="savepoint",
                ),
                series(
                    OPERATOR,
                    "tidemark_operator_archival_blocked_seconds",
                    "600+60x30",
                    **other,
                    guard="pending compaction",
                ),
            ],
            [{**table, "guard": "savepoint"}],
            quiet_at="3m",
        ),
        case(
            "TidemarkHudiTableCompactionBacklog",
            "45m",
            [
                series(OPERATOR, "tidemark_operator_pending_compactions", f"{op['pendingCompactions']}+0x60", **table),
                series(
                    OPERATOR, "tidemark_operator_pending_compactions", f"{op['pendingCompactions'] - 1}+0x60", **other
                ),
            ],
            [table],
            quiet_at="20m",
        ),
        case(
            "TidemarkHudiTableDegraded",
            "30m",
            [
                series(OPERATOR, "tidemark_operator_table_degraded", "1+0x40", **table, reason="InvalidSpec"),
                series(OPERATOR, "tidemark_operator_table_degraded", "0+0x40", **other, reason=""),
            ],
            [{**table, "reason": "InvalidSpec"}],
            quiet_at="5m",
        ),
        case(
            "TidemarkOperatorDown",
            "20m",
            [series(OPERATOR, "up", "1+0x5 0+0x30")],
            [{**where, "job": JOB[OPERATOR]}],
            quiet_at="8m",
        ),
        case("TidemarkOperatorDown", "20m", [], [{**where, "job": JOB[OPERATOR]}]),
        case("TidemarkOperatorDown", "20m", [series(OPERATOR, "up", "1+0x30"), series(COORDINATOR, "up", "0x30")], []),
    ]


def rule_groups(docs: list[dict[str, Any]], annotations: bool) -> dict[str, Any]:
    (rule,) = of_kind(docs, "PrometheusRule")
    groups = rule["spec"]["groups"]
    if not annotations:
        groups = [
            {**g, "rules": [{k: v for k, v in r.items() if k != "annotations"} for r in g["rules"]]} for g in groups
        ]
    return {"groups": groups}


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=120, check=False, cwd=cwd)


def run_unit_tests(
    override: dict[str, Any], tests: list[dict[str, Any]], tmp: Path
) -> subprocess.CompletedProcess[str]:
    (tmp / "rules.yaml").write_text(yaml.safe_dump(rule_groups(render(override, tmp), annotations=False)))
    spec = {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": tests}
    (tmp / "tests.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return promtool("test", "rules", "tests.yaml", cwd=tmp)


@needs_helm
@needs_promtool
@pytest.mark.parametrize("override", [{"prometheusRule": {"enabled": True}}, FULL], ids=["defaults", "everything-on"])
def test_every_alert_fires_and_stays_quiet_as_it_should(override: dict[str, Any], tmp_path: Path) -> None:
    tests = unit_tests(chart_values(override))
    done = run_unit_tests(override, tests, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    # every alert rendered has a case where it fires and one where it does not
    rules = alert_rules(render(override, tmp_path))
    checks = [c for t in tests for c in t["alert_rule_test"]]
    assert {c["alertname"] for c in checks if c["exp_alerts"]} == set(rules)
    assert {c["alertname"] for c in checks if not c["exp_alerts"]} == set(rules)


@needs_helm
@needs_promtool
def test_the_rule_tests_can_fail(tmp_path: Path) -> None:
    """The same cases against rules whose thresholds moved: promtool says which alert differs."""
    moved = merged(
        FULL,
        {
            "prometheusRule": {
                "runsFailingFor": "2h",
                "operator": {"pendingCompactions": 10, "overdueSeconds": 99999},
            }
        },
    )
    done = run_unit_tests(moved, unit_tests(chart_values(FULL)), tmp_path)
    assert done.returncode != 0
    output = done.stdout + done.stderr
    assert "TidemarkHudiTableCompactionBacklog" in output
    assert "TidemarkHudiTableServiceOverdue" in output
    assert "TidemarkServiceRunsFailing" in output


@needs_helm
@needs_promtool
@pytest.mark.parametrize("override", [{"prometheusRule": {"enabled": True}}, FULL], ids=["defaults", "everything-on"])
def test_promtool_checks_the_rules_with_their_annotations(override: dict[str, Any], tmp_path: Path) -> None:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rule_groups(render(override, tmp_path), annotations=True)))
    done = promtool("check", "rules", "rules.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout
