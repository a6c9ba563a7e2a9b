"""deploy/: the Prometheus alert rules pass promtool and their unit tests, and the rules and the
Grafana dashboard query only metrics the service exposes; the Kubernetes example and the
image's health check probe paths the app serves."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from clock_server.api import create_app
from clock_server.metrics import LOOPS, Metrics
from clock_server.runtime.build_api import build_services
from clock_server.settings import Settings
from clock_server.store.alarms import AlarmStore
from clock_server.store.db import open_database
from clock_server.timesource import SystemClock

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "deploy" / "prometheus" / "clock-alerts.yml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "clock-alerts.test.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "clock-dashboard.json"
OPERATIONS = ROOT / "docs" / "operations.md"

PROMETHEUS_OWN = {"up"}
REQUIRED_ALERTS = {
    "ClockAlarmsDead",
    "ClockOverdueBacklog",
    "ClockRingLatenessHigh",
    "ClockBrokerDown",
    "ClockDatabaseDown",
    "ClockNoLiveEngine",
    "ClockApplicationRingLate",
    "ClockWebhookFailures",
    "ClockPullBacklogOld",
    "ClockLoopErrors",
    "ClockMemoryGrowing",
}
DASHBOARD_METRICS = {
    "clock_alarms_rung_total",
    "clock_alarms_created_total",
    "clock_ring_lateness_seconds_bucket",
    "clock_overdue_alarms",
    "clock_heap_size",
    "clock_alarms_dead_total",
    "clock_alarms_expired_total",
    "clock_publish_failures_total",
    "clock_ring_throttled_total",
    "clock_creates_rejected_total",
    "clock_claims_taken_over_total",
    "clock_live_engines",
    "clock_webhook_calls_total",
    "clock_webhook_call_seconds_bucket",
    "clock_pull_messages_waiting",
    "clock_pull_oldest_waiting_seconds",
    "clock_loop_errors_total",
    "clock_process_cpu_seconds_total",
    "clock_process_resident_memory_bytes",
}

_KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan"}
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_NAME = re.compile(r"(?<![\w.:$])[a-zA-Z_:][\w:]*")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: identifiers outside strings, label
    matchers, ranges and grouping clauses that are neither functions nor keywords."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = _GROUPING.sub(" ", text)
    names = set()
    for match in _NAME.finditer(text):
        if re.match(r"\s*\(", text[match.end() :]) or match.group() in _KEYWORDS:
            continue
        names.add(match.group())
    return names


def exposed_names() -> set[str]:
    """What /metrics shows: counters with _total, histograms as _bucket, _sum and _count."""
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
    return {
        family.name + suffix
        for family in Metrics().registry.collect()
        for suffix in suffixes[family.type]
    }


def listed_metrics(guide: str) -> set[str]:
    """The names /metrics shows for the metrics the table under a guide's "## Metrics" lists,
    from each row's name and type: a counter with _total, a histogram's three series."""
    section = guide.split("\n## Metrics\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([a-z_:]+)` \| ([a-z]+)[^|]*\|", section, re.MULTILINE)
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
    return {
        (name.removesuffix("_total") if kind == "counter" else name) + suffix
        for name, kind in rows
        for suffix in suffixes[kind]
    }


def alert_rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def dashboard_exprs() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]


def promtool() -> str:
    """promtool's path; a test that needs it fails, never skips, when it is missing."""
    path = shutil.which("promtool")
    if path is None:
        pytest.fail(
            "promtool is not installed: it comes with Debian's prometheus package "
            "(apt-get install --no-install-recommends prometheus); .ci/run installs it"
        )
    return path


def run_promtool(*args: str, cwd: Path = ROOT) -> None:
    result = subprocess.run(
        [promtool(), *args], cwd=cwd, capture_output=True, text=True, timeout=30, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_accepts_the_rules() -> None:
    run_promtool("check", "rules", str(RULES))


def test_the_rules_unit_tests_pass() -> None:
    run_promtool("test", "rules", RULE_TESTS.name, cwd=RULE_TESTS.parent)


def test_the_unit_tests_show_every_alert_firing_and_quiet() -> None:
    fired: set[str] = set()
    quiet: set[str] = set()
    for case in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        for check in case.get("alert_rule_test", []):
            (fired if check.get("exp_alerts") else quiet).add(check["alertname"])
    alerts = {rule["alert"] for rule in alert_rules()}
    assert alerts - fired == set(), "alerts no unit test shows firing"
    assert alerts - quiet == set(), "alerts no unit test shows quiet"


def test_the_required_alerts_are_there() -> None:
    assert REQUIRED_ALERTS - {rule["alert"] for rule in alert_rules()} == set()


@pytest.mark.parametrize("rule", alert_rules(), ids=lambda rule: str(rule["alert"]))
def test_an_alert_waits_and_points_to_its_runbook(rule: dict[str, Any]) -> None:
    assert re.fullmatch(r"\d+[smh]", str(rule.get("for", "")))
    assert rule["labels"]["severity"] in {"warning", "critical"}
    assert rule["annotations"]["summary"]
    anchor = f"docs/operations.md#{rule['alert'].lower()}"
    assert anchor in rule["annotations"]["description"]
    assert f"### {rule['alert']}\n" in OPERATIONS.read_text()


@pytest.mark.parametrize("rule", alert_rules(), ids=lambda rule: str(rule["alert"]))
def test_an_alert_names_only_exposed_metrics(rule: dict[str, Any]) -> None:
    names = metric_names(rule["expr"])
    assert names, rule["expr"]
    assert names - exposed_names() - PROMETHEUS_OWN == set(), rule["expr"]


def test_the_dashboard_names_only_exposed_metrics() -> None:
    exprs = dashboard_exprs()
    named = set()
    for expr in exprs:
        names = metric_names(expr)
        assert names, expr
        assert names - exposed_names() - PROMETHEUS_OWN == set(), expr
        named |= names
    assert DASHBOARD_METRICS - named == set()


def test_the_rules_and_the_dashboard_name_only_documented_metrics() -> None:
    documented = listed_metrics(OPERATIONS.read_text()) | PROMETHEUS_OWN
    exprs = [str(rule["expr"]) for rule in alert_rules()] + dashboard_exprs()
    undocumented = {expr: metric_names(expr) - documented for expr in exprs}
    assert {expr: names for expr, names in undocumented.items() if names} == {}


def test_the_loop_errors_runbook_names_every_loop() -> None:
    guide = OPERATIONS.read_text()
    runbook = guide.split("\n### ClockLoopErrors\n", 1)[1].split("\n### ", 1)[0]
    rows = [line.split(" | ")[0] for line in runbook.splitlines() if line.startswith("| `")]
    assert set(re.findall(r"`(\w+)`", " ".join(rows))) == set(LOOPS)


@pytest.mark.parametrize(
    ("row", "names"),
    [
        ("| `clock_a` | counter | what |", {"clock_a_total"}),
        ("| `clock_a_total` | counter | what |", {"clock_a_total"}),
        ("| `clock_a_total` | gauge | what |", {"clock_a_total"}),
        ("| `clock_a` | gauge | what, `b` |", {"clock_a"}),
        ("| `clock_a` | histogram | what |", {"clock_a_bucket", "clock_a_sum", "clock_a_count"}),
        ("| `clock_a` | counter (by `b`) | what |", {"clock_a_total"}),
        ("| metric | type | meaning |", set()),
    ],
)
def test_listed_metrics_reads_the_table_of_metrics(row: str, names: set[str]) -> None:
    guide = f"# Guide\n\n## Metrics\n\n{row}\n\n## Alerts\n\n| `clock_z` | gauge | z |\n"
    assert listed_metrics(guide) == names


def test_the_dashboard_panels_have_unique_ids_and_do_not_overlap() -> None:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    ids = [panel["id"] for panel in panels]
    assert len(ids) == len(set(ids)), ids
    cells: dict[tuple[int, int], str] = {}
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = panel["title"]


def test_every_dashboard_query_uses_the_datasource_variable() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["DS_PROMETHEUS"]["type"] == "datasource"
    for panel in dashboard["panels"]:
        assert panel["datasource"]["uid"] == "${DS_PROMETHEUS}", panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${DS_PROMETHEUS}", panel["title"]


def test_the_dashboard_queries_parse(tmp_path: Path) -> None:
    """promtool parses PromQL only in rule files: each query, its Grafana variables filled in,
    becomes a recording rule for `check rules`."""
    records = []
    for index, expr in enumerate(dashboard_exprs()):
        filled = expr.replace("$__rate_interval", "1m").replace("$instance", ".*")
        records.append({"record": f"dashboard:query_{index}", "expr": filled})
    path = tmp_path / "dashboard.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": records}]}))
    run_promtool("check", "rules", str(path))


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ('up{job="clock"} == 0', {"up"}),
        ("absent(up == 1)", {"up"}),
        (
            "histogram_quantile(0.99, sum by (le) (rate(clock_ring_lateness_seconds_bucket[5m])))",
            {"clock_ring_lateness_seconds_bucket"},
        ),
        (
            'sum by (app, code) (rate(rejected_total{a=~"x"}[$__rate_interval]))',
            {"rejected_total"},
        ),
        ("sum(rate(a_total[5m])) / ignoring(x) sum(b) > 1e3", {"a_total", "b"}),
        ('max(c{instance=~"$instance"}) < 1 and on(job) d offset 5m', {"c", "d"}),
    ],
)
def test_metric_names_reads_promql(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


# --- Kubernetes and Docker ---------------------------------------------------------------------

KUBERNETES = ROOT / "deploy" / "kubernetes" / "clock.yaml"
DOCKERFILE = ROOT / "Dockerfile"


def served_paths() -> set[str]:
    """The paths the app serves (building it connects to nothing)."""
    services = build_services(
        Settings(), AlarmStore(open_database("sqlite://")), SystemClock(), Metrics()
    )
    return {rule.rule for rule in create_app(services).url_map.iter_rules()}


def kubernetes_objects() -> dict[str, dict[str, Any]]:
    return {doc["kind"]: doc for doc in yaml.safe_load_all(KUBERNETES.read_text()) if doc}


def server_container() -> dict[str, Any]:
    (container,) = kubernetes_objects()["Deployment"]["spec"]["template"]["spec"]["containers"]
    return container  # type: ignore[no-any-return]


def test_the_kubernetes_example_probes_paths_the_app_serves() -> None:
    container = server_container()
    probes = {kind: container[kind]["httpGet"] for kind in ("startupProbe", "livenessProbe",
              "readinessProbe")}  # fmt: skip
    assert probes["livenessProbe"]["path"] == "/livez"
    assert probes["readinessProbe"]["path"] == "/readyz"
    assert {probe["path"] for probe in probes.values()} <= served_paths()
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    env = {item["name"]: item for item in container["env"]}
    for probe in probes.values():
        assert ports[probe["port"]] == int(env["CLOCK_PORT"]["value"])
    assert env["CLOCK_HOST"]["value"] == "0.0.0.0"


def test_the_kubernetes_example_takes_its_secrets_from_a_secret() -> None:
    env = {item["name"]: item for item in server_container()["env"]}
    for name in ("CLOCK_DATABASE_URL", "CLOCK_AMQP_URL", "CLOCK_TOKENS"):
        assert set(env[name]) == {"name", "valueFrom"}, name
        assert env[name]["valueFrom"]["secretKeyRef"]["name"] == "clock"
    Settings.from_env({name: item["value"] for name, item in env.items() if "value" in item})


def test_the_kubernetes_example_gives_the_shutdown_its_time() -> None:
    objects = kubernetes_objects()
    pod = objects["Deployment"]["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] > Settings().shutdown_timeout_s + 1
    selector = objects["Deployment"]["spec"]["selector"]["matchLabels"]
    assert objects["Service"]["spec"]["selector"] == selector
    (migrate,) = objects["Job"]["spec"]["template"]["spec"]["containers"]
    assert migrate["args"] == ["db", "upgrade"]


def test_the_image_checks_its_health_by_livez() -> None:
    (healthcheck,) = [line for line in DOCKERFILE.read_text().splitlines()
                      if line.startswith("HEALTHCHECK")]  # fmt: skip
    paths = set(re.findall(r"http://127\.0\.0\.1:8080(/\w+)", healthcheck))
    assert paths == {"/livez"}
    assert paths <= served_paths()
