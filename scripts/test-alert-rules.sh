#!/usr/bin/env bash
# Checks the Prometheus rules of deploy/monitoring/ with Debian's promtool:
#   1. `promtool check rules` on every rule file (*-rules.yml), `promtool check
#      config` on the example prometheus.yml;
#   2. the unit tests of deploy/monitoring/tests/*.test.yml, each expected alert's
#      annotations filled in from its rule's templates ({{ $labels.NAME }} expanded
#      with the alert's labels; any other template is refused, so tests never copy
#      long texts by hand), then `promtool test rules`;
#   3. every alert has a summary, a description and a runbook anchor that exists in
#      docs/operations.md.
# Part of scripts/test.sh's harness stage. Needs promtool (scripts/setup.sh installs
# Debian's prometheus package).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MONITORING=$REPO/deploy/monitoring
command -v promtool >/dev/null 2>&1 ||
  { echo "test-alert-rules: promtool is missing: run scripts/setup.sh (Debian package prometheus)" >&2; exit 1; }

promtool check rules "$MONITORING"/*-rules.yml
# The example configuration loads them (rule_files are relative to it).
promtool check config "$MONITORING/prometheus.yml"

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
python3 - "$MONITORING" "$WORK" "$REPO/docs/operations.md" <<'PYTHON'
import glob, os, re, sys
import yaml

monitoring, work, runbook_doc = sys.argv[1:4]
rules = {}
for path in glob.glob(os.path.join(monitoring, "*-rules.yml")):
    for group in yaml.safe_load(open(path))["groups"]:
        for rule in group["rules"]:
            if "alert" in rule:
                rules[rule["alert"]] = (path, rule)

anchors = set()
for line in open(runbook_doc):
    match = re.match(r"#+ (.*)", line)
    if match:
        anchors.add(re.sub(r"[^a-z0-9 -]", "", match.group(1).strip().lower()).replace(" ", "-"))
problems = []
for name, (path, rule) in sorted(rules.items()):
    annotations = rule.get("annotations", {})
    for key in ("summary", "description", "runbook"):
        if not annotations.get(key):
            problems.append(f"{name} ({path}): no {key} annotation")
    anchor = annotations.get("runbook", "").partition("#")[2]
    if anchor and anchor not in anchors:
        problems.append(f"{name}: runbook anchor #{anchor} is not a heading of {runbook_doc}")

TEMPLATE = re.compile(r"\{\{\s*(.*?)\s*\}\}")
def expand(text, labels):
    def one(match):
        label = re.fullmatch(r"\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)", match.group(1))
        if not label:
            raise SystemExit(f"test-alert-rules: template {match.group(0)!r} is not $labels.NAME: "
                             "expand it here or keep annotations to labels")
        return str(labels.get(label.group(1), ""))
    return TEMPLATE.sub(one, text)

tested = set()
for path in glob.glob(os.path.join(monitoring, "tests", "*.test.yml")):
    document = yaml.safe_load(open(path))
    document["rule_files"] = [os.path.normpath(os.path.join(os.path.dirname(path), f)) for f in document["rule_files"]]
    for test in document["tests"]:
        for case in test.get("alert_rule_test", []):
            name = case["alertname"]
            if name not in rules:
                problems.append(f"{path}: no alert {name} in the rule files")
                continue
            tested.add(name)
            rule = rules[name][1]
            for alert in case.get("exp_alerts", []):
                labels = {key: str(value) for key, value in alert.get("exp_labels", {}).items()}
                labels.setdefault("alertname", name)
                alert["exp_annotations"] = {key: expand(value, labels) for key, value in rule.get("annotations", {}).items()}
    with open(os.path.join(work, os.path.basename(path)), "w") as out:
        yaml.safe_dump(document, out, sort_keys=False)
for name in sorted(set(rules) - tested):
    problems.append(f"alert {name} has no unit test in {monitoring}/tests")
if problems:
    print("test-alert-rules: " + "\n  ".join(["problems:"] + problems), file=sys.stderr)
    sys.exit(1)
print(f"test-alert-rules: {len(rules)} alerts, every one unit-tested and with a runbook anchor")
PYTHON
promtool test rules "$WORK"/*.test.yml
