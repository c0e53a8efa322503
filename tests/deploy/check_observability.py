"""Checks the alerts and the Grafana dashboard in deploy/observability offline.

- the PrometheusRule: its rule groups pass `promtool check rules`, and
  alerts.test.yaml passes `promtool test rules`, with at least one case where each
  alert fires and one where it stays quiet; every alert has a severity, a summary,
  a description and a runbook link to its heading in docs/observability.md;
- the dashboard: unique panel ids, a grid position and the `$datasource` data
  source on every panel, the datasource/namespace/job variables; every query
  parses (promtool, as a recording rule, the Grafana variables filled in) and
  every selector in it filters by `$namespace` and `$job`;
- store-wide gauges are aggregated with max, in the rules and the dashboard;
- `kubectl kustomize deploy/observability` and `helm template` with
  metrics.prometheusRule.enabled and metrics.grafanaDashboard.enabled render the
  rule groups and the dashboard unchanged, the chart's copies in its files/ are
  the same bytes as the sources, and the chart renders neither by default;
- with SCRAPE, a file holding a node's `GET /metrics` answer: every metric the
  rules and the dashboard name is in it (histograms by family).

usage: check_observability.py [SCRAPE]
Needs target/tools/{promtool,kubectl,helm} (scripts/setup.sh). Exits non-zero
and lists every problem found.
"""

import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import kubernetes_validate
import yaml

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "deploy/observability"
RULE = SOURCE / "prometheus-rule.yaml"
DASHBOARD = SOURCE / "awaken-dashboard.json"
ALERT_TESTS = SOURCE / "alerts.test.yaml"
CHART = ROOT / "deploy/helm/awaken"
CHART_COPIES = {RULE: CHART / "files/prometheus-rule.yaml", DASHBOARD: CHART / "files/awaken-dashboard.json"}
DOCS = ROOT / "docs/observability.md"
TOOLS = ROOT / "target/tools"
# The name alerts.test.yaml's rule_files expects the rule groups under.
RULES_FILE_NAME = "awaken.rules.yaml"
DASHBOARD_KEY = "awaken-dashboard.json"
KUBERNETES_VERSIONS = ("1.27.0", "1.37.0")
SEVERITIES = {"critical", "warning", "info"}
# Gauges every node reports alike (read from the shared store or ledger): summing
# them over the nodes multiplies them.
STORE_WIDE = {"awaken_runs_waiting", "awaken_runs_waiting_oldest_seconds", "awaken_mailbox_dispatches"}
# What the namespace and job variables list: a gauge every node serves from its
# start. A labelled family (awaken_runs_started_total) has no series before its
# first run, so after a restart the variables would list nothing.
VARIABLE_METRIC = "awaken_threads_live"
ROWS = ["Runs", "Model calls", "Tools", "Approvals", "Mailbox", "Cluster", "Store", "HTTP", "Telemetry"]
# Grafana's interval variables, replaced by a duration for promtool.
GRAFANA_INTERVALS = {"__rate_interval": "5m", "__interval": "1m", "__range": "1h"}
DATASOURCE = "${datasource}"
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")

problems = []


def problem(message):
    problems.append(message)


def run(args, cwd=ROOT):
    """Runs a tool (from the repository root); returns the finished process."""
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True)


def tool(name):
    path = TOOLS / name
    if not path.exists():
        sys.exit(f"{path} is missing: run scripts/setup.sh")
    return str(path)


# --- PromQL, as much of it as telling metric names from the rest takes ---------

AGGREGATIONS = {
    "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
    "bottomk", "topk", "quantile", "limitk", "limit_ratio",
}
KEYWORDS = AGGREGATIONS | {"and", "or", "unless", "bool", "offset", "inf", "nan", "atan2"}
# Keywords followed by a parenthesised list of label names (group_* may have none).
LABEL_LISTS = {"by", "without", "on", "ignoring", "group_left", "group_right"}
MATCHER = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')


def skip_string(expr, i):
    quote = expr[i]
    i += 1
    while i < len(expr) and expr[i] != quote:
        i += 2 if expr[i] == "\\" and quote != "`" else 1
    return i + 1


def closing(expr, i, open_char, close_char):
    """Index of the bracket closing the one at i, strings skipped."""
    depth = 0
    while i < len(expr):
        if expr[i] in "\"'`":
            i = skip_string(expr, i)
            continue
        if expr[i] == open_char:
            depth += 1
        elif expr[i] == close_char:
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise ValueError(f"unbalanced {open_char} in {expr!r}")


def selectors(expr):
    """(metric name or None, [(label, op, value)], offset) of every vector selector."""
    found = []
    i = 0
    while i < len(expr):
        c = expr[i]
        if c in "\"'`":
            i = skip_string(expr, i)
        elif c == "[":
            i = closing(expr, i, "[", "]") + 1
        elif c == "{":
            end = closing(expr, i, "{", "}")
            found.append((None, MATCHER.findall(expr[i + 1 : end]), i))
            i = end + 1
        elif c.isdigit() or c == ".":
            while i < len(expr) and (expr[i].isalnum() or expr[i] == "."):
                i += 1
        elif c.isalpha() or c in "_:":
            j = i
            while j < len(expr) and (expr[j].isalnum() or expr[j] in "_:"):
                j += 1
            word = expr[i:j]
            k = j
            while k < len(expr) and expr[k].isspace():
                k += 1
            following = expr[k] if k < len(expr) else ""
            if word in LABEL_LISTS:
                i = closing(expr, k, "(", ")") + 1 if following == "(" else j
            elif following == "(" or word.lower() in KEYWORDS:
                i = j
            else:
                matchers = []
                if following == "{":
                    end = closing(expr, k, "{", "}")
                    matchers = MATCHER.findall(expr[k + 1 : end])
                    j = end + 1
                found.append((word, matchers, i))
                i = j
        else:
            i += 1
    return found


def metric_names(expr):
    return {name for name, _, _ in selectors(expr) if name}


def family(name):
    for suffix in HISTOGRAM_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def aggregation_around(expr, offset):
    """The aggregation operator nearest around expr[offset], None without one."""
    opened = []
    i = 0
    while i < offset:
        if expr[i] in "\"'`":
            i = skip_string(expr, i)
            continue
        if expr[i] == "(":
            opened.append(i)
        elif expr[i] == ")":
            opened.pop()
        i += 1
    for paren in reversed(opened):
        before = re.search(r"(\w+)\s*(?:(?:by|without)\s*\([^()]*\)\s*)?$", expr[:paren])
        if before and before.group(1) in AGGREGATIONS:
            return before.group(1)
    return None


def check_store_wide(where, expr):
    """Store-wide gauges are taken with max over the nodes, never summed."""
    for name, _, offset in selectors(expr):
        if name in STORE_WIDE and aggregation_around(expr, offset) != "max":
            problem(f"{where}: take {name} with max over the nodes: {expr}")


# --- the rules ------------------------------------------------------------------


def doc_anchors():
    """GitHub's anchors of the headings under `## Alerts` in docs/observability.md."""
    anchors = set()
    inside = False
    for line in DOCS.read_text().splitlines():
        heading = re.match(r"^(#+)\s+(.*?)\s*$", line)
        if not heading:
            continue
        level = len(heading.group(1))
        if level <= 2:
            inside = heading.group(2) == "Alerts"
        if inside:
            slug = re.sub(r"[^\w\- ]", "", heading.group(2).lower()).replace(" ", "-")
            anchors.add(slug)
    return anchors


def check_rules(source, tmp):
    """promtool check rules and test rules; what each alert must carry."""
    if (source.get("apiVersion"), source.get("kind")) != ("monitoring.coreos.com/v1", "PrometheusRule"):
        problem(f"{RULE.name}: not a monitoring.coreos.com/v1 PrometheusRule")
        return set()
    groups = source["spec"]["groups"]
    rules_dir = tmp / "rules"
    rules_dir.mkdir()
    rules_file = rules_dir / RULES_FILE_NAME
    rules_file.write_text(yaml.safe_dump(source["spec"], sort_keys=False))
    checked = run([tool("promtool"), "check", "rules", str(rules_file)])
    if checked.returncode:
        problem(f"promtool check rules {RULE.name}:\n{checked.stdout}{checked.stderr}")
    shutil.copy(ALERT_TESTS, rules_dir / ALERT_TESTS.name)
    tested = run([tool("promtool"), "test", "rules", ALERT_TESTS.name], cwd=rules_dir)
    if tested.returncode:
        problem(f"promtool test rules {ALERT_TESTS.name}:\n{tested.stdout}{tested.stderr}")

    anchors = doc_anchors()
    alerts = []
    names = set()
    for group in groups:
        for rule in group["rules"]:
            names |= metric_names(rule["expr"])
            if "alert" not in rule:
                continue
            alert = rule["alert"]
            alerts.append(alert)
            check_store_wide(f"alert {alert}", rule["expr"])
            severity = rule.get("labels", {}).get("severity")
            if severity not in SEVERITIES:
                problem(f"alert {alert}: severity {severity!r} is not one of {sorted(SEVERITIES)}")
            annotations = rule.get("annotations", {})
            for key in ("summary", "description", "runbook_url"):
                if not annotations.get(key):
                    problem(f"alert {alert}: no {key} annotation")
            runbook = annotations.get("runbook_url", "")
            expected = f"docs/observability.md#{alert.lower()}"
            if runbook != expected:
                problem(f"alert {alert}: runbook_url {runbook!r}, expected {expected!r}")
            elif alert.lower() not in anchors:
                problem(f"alert {alert}: docs/observability.md has no heading {alert} under ## Alerts")
    if len(alerts) != len(set(alerts)):
        problem(f"{RULE.name}: alert names repeat")

    firing, quiet = set(), set()
    for case in yaml.safe_load(ALERT_TESTS.read_text())["tests"]:
        for check in case.get("alert_rule_test", []):
            (firing if check.get("exp_alerts") else quiet).add(check["alertname"])
    for alert in alerts:
        if alert not in firing:
            problem(f"{ALERT_TESTS.name}: no case where {alert} fires")
        if alert not in quiet:
            problem(f"{ALERT_TESTS.name}: no case where {alert} stays quiet")
    return names


# --- the dashboard --------------------------------------------------------------


def all_panels(panels):
    for panel in panels:
        yield panel
        yield from all_panels(panel.get("panels", []))


def variable_query(variable):
    query = variable.get("query", "")
    return query.get("query", "") if isinstance(query, dict) else query


def fill_in(expr, variables):
    """expr with Grafana's variables replaced, for promtool."""

    def value(match):
        name = match.group(1) or match.group(2)
        if name in GRAFANA_INTERVALS:
            return GRAFANA_INTERVALS[name]
        if name in variables:
            return ".*"
        return match.group(0)

    return re.sub(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)", value, expr)


def filters_by_variables(where, expr):
    for name, matchers, _ in selectors(expr):
        for label in ("namespace", "job"):
            if (label, "=~", f"${label}") not in matchers:
                problem(f'{where}: {name or "a selector"} does not filter by {label}=~"${label}": {expr}')


def check_dashboard(dashboard, tmp):
    names = set()
    if dashboard.get("schemaVersion", 0) < 39:
        problem(f"{DASHBOARD.name}: schemaVersion {dashboard.get('schemaVersion')} < 39")
    variables = {v["name"]: v for v in dashboard.get("templating", {}).get("list", [])}
    source = variables.get("datasource", {})
    if (source.get("type"), source.get("query")) != ("datasource", "prometheus"):
        problem(f"{DASHBOARD.name}: no datasource variable of type prometheus")
    recorded = []
    for name in ("namespace", "job"):
        variable = variables.get(name)
        if not variable:
            problem(f"{DASHBOARD.name}: no {name} variable")
            continue
        if variable.get("datasource", {}).get("uid") != DATASOURCE:
            problem(f"{DASHBOARD.name}: variable {name} does not use {DATASOURCE}")
        query = variable_query(variable)
        values = re.fullmatch(r"\s*label_values\((.*),\s*(\w+)\s*\)\s*", query)
        if not values or values.group(2) != name or metric_names(values.group(1)) != {VARIABLE_METRIC}:
            problem(f"{DASHBOARD.name}: variable {name} is not label_values({VARIABLE_METRIC}…, {name}): {query}")
            continue
        names |= metric_names(values.group(1))
        recorded.append((f"variable_{name}", fill_in(values.group(1), variables)))

    panels = list(all_panels(dashboard.get("panels", [])))
    ids = [panel.get("id") for panel in panels]
    if len(ids) != len(set(ids)) or None in ids:
        problem(f"{DASHBOARD.name}: panel ids missing or repeated: {ids}")
    rows = [panel.get("title") for panel in panels if panel.get("type") == "row"]
    if rows != ROWS:
        problem(f"{DASHBOARD.name}: rows {rows}, expected {ROWS}")
    cells = {}
    for panel in panels:
        where = f"panel {panel.get('id')} {panel.get('title')!r}"
        if panel.get("datasource", {}).get("uid") != DATASOURCE:
            problem(f"{where}: data source is not {DATASOURCE}")
        grid = panel.get("gridPos", {})
        if not all(isinstance(grid.get(key), int) for key in ("x", "y", "w", "h")):
            problem(f"{where}: no gridPos")
            continue
        if grid["x"] < 0 or grid["w"] < 1 or grid["h"] < 1 or grid["x"] + grid["w"] > 24:
            problem(f"{where}: gridPos {grid} is outside the 24 columns")
        covered = {
            (x, y)
            for x in range(grid["x"], grid["x"] + grid["w"])
            for y in range(grid["y"], grid["y"] + grid["h"])
        }
        overlapped = sorted({cells[cell] for cell in covered if cell in cells})
        if overlapped:
            problem(f"{where}: overlaps panels {overlapped}")
        cells.update((cell, panel.get("id")) for cell in covered)
        if panel.get("type") == "row":
            continue
        targets = panel.get("targets", [])
        if not targets:
            problem(f"{where}: no query")
        refs = [target.get("refId") for target in targets]
        if len(refs) != len(set(refs)) or None in refs:
            problem(f"{where}: refIds missing or repeated")
        for target in targets:
            expr = target.get("expr", "")
            if target.get("datasource", {}).get("uid") != DATASOURCE:
                problem(f"{where} {target.get('refId')}: data source is not {DATASOURCE}")
            names |= metric_names(expr)
            filters_by_variables(where, expr)
            check_store_wide(where, expr)
            recorded.append((f"panel_{panel.get('id')}_{target.get('refId')}", fill_in(expr, variables)))

    # Every query as a recording rule: promtool parses it.
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:{name}", "expr": expr} for name, expr in recorded
    ]}]}
    path = tmp / "dashboard.rules.yaml"
    path.write_text(yaml.safe_dump(rules, sort_keys=False))
    checked = run([tool("promtool"), "check", "rules", str(path)])
    if checked.returncode:
        problem(f"promtool check rules (the dashboard's queries):\n{checked.stdout}{checked.stderr}")
    return names


# --- renderings -----------------------------------------------------------------


def rendered(args):
    out = run(args)
    if out.returncode:
        problem(f"{' '.join(args[:2])}: {out.stderr}")
        return []
    return [obj for obj in yaml.safe_load_all(out.stdout) if obj]


def check_rendering(name, objects, rule, dashboard_text):
    rules = [obj for obj in objects if obj["kind"] == "PrometheusRule"]
    boards = [
        obj for obj in objects
        if obj["kind"] == "ConfigMap" and obj["metadata"].get("labels", {}).get("grafana_dashboard") == "1"
    ]
    if len(rules) != 1 or rules[0]["apiVersion"] != rule["apiVersion"] or rules[0]["spec"] != rule["spec"]:
        problem(f"{name}: does not render one PrometheusRule with the groups of {RULE.name}")
    if len(boards) != 1 or boards[0].get("data") != {DASHBOARD_KEY: dashboard_text}:
        problem(f'{name}: does not render one ConfigMap labelled grafana_dashboard: "1" holding {DASHBOARD.name} unchanged')
    for board in boards:
        # kubectl apply keeps a copy in an annotation, 256 KiB at most.
        if len(json.dumps(board)) >= 256 * 1024:
            problem(f"{name}: the dashboard's ConfigMap is too large for kubectl apply")
        for version in KUBERNETES_VERSIONS:
            try:
                kubernetes_validate.validate(board, version, strict=True)
            except kubernetes_validate.ValidationError as error:
                problem(f"{name}: ConfigMap for {version}: {error.message}")


def check_renderings(rule, dashboard_text):
    for source, copy in CHART_COPIES.items():
        if not copy.exists() or copy.read_bytes() != source.read_bytes():
            problem(f"{copy.relative_to(ROOT)} differs from {source.relative_to(ROOT)}: copy it over")
    kustomized = rendered([tool("kubectl"), "kustomize", str(SOURCE.relative_to(ROOT))])
    if sorted(obj["kind"] for obj in kustomized) != ["ConfigMap", "PrometheusRule"]:
        problem(f"kubectl kustomize {SOURCE.relative_to(ROOT)}: renders {[obj['kind'] for obj in kustomized]}")
    check_rendering("kubectl kustomize", kustomized, rule, dashboard_text)
    helm = [tool("helm"), "template", "awaken", str(CHART.relative_to(ROOT))]
    on = ["--set", "metrics.prometheusRule.enabled=true", "--set", "metrics.grafanaDashboard.enabled=true"]
    check_rendering("helm template (both on)", rendered(helm + on), rule, dashboard_text)
    for obj in rendered(helm):
        labels = obj["metadata"].get("labels", {})
        if obj["kind"] == "PrometheusRule" or "grafana_dashboard" in labels:
            problem(f"helm template: renders {obj['kind']} {obj['metadata']['name']} by default")


# --- a real scrape --------------------------------------------------------------


def scraped_families(path):
    """Family names of the samples and the declared metrics of an OpenMetrics text."""
    known = set()
    for line in Path(path).read_text().splitlines():
        declared = re.match(r"#\s*TYPE\s+(\S+)\s+(\S+)", line)
        if declared:
            name, kind = declared.groups()
            known.add(family(name))
            if kind == "counter":
                known.add(f"{name}_total")
            continue
        sample = re.match(r"([A-Za-z_:][A-Za-z0-9_:]*)[\s{]", line)
        if sample:
            known.add(family(sample.group(1)))
    return known


def main():
    scrape = sys.argv[1] if len(sys.argv) > 1 else None
    rule = yaml.safe_load(RULE.read_text())
    dashboard_text = DASHBOARD.read_text()
    try:
        dashboard = json.loads(dashboard_text)
    except json.JSONDecodeError as error:
        sys.exit(f"{DASHBOARD.name}: {error}")
    with tempfile.TemporaryDirectory() as tmp:
        names = check_rules(rule, Path(tmp))
        names |= check_dashboard(dashboard, Path(tmp))
    check_renderings(rule, dashboard_text)
    if scrape:
        known = scraped_families(scrape)
        missing = {}
        for name in names:
            if family(name) not in known:
                missing.setdefault(family(name), set()).add(name)
        for name, uses in sorted(missing.items()):
            # A histogram by its family; another name as the rules write it.
            shown = name if len(uses) > 1 or any(use.endswith(("_bucket", "_sum")) for use in uses) else uses.pop()
            problem(f"{scrape}: no metric {shown}, which the rules or the dashboard use")
    if problems:
        for message in problems:
            print(message, file=sys.stderr)
        sys.exit(f"{len(problems)} problem(s) in deploy/observability")
    print(f"deploy/observability: {len(names)} metrics in the rules and the dashboard, all checks passed"
          + (f", all of them in {scrape}" if scrape else ""))


main()
