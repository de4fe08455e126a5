"""Static checks of the OpenTelemetry Collector configurations in this folder (no collector
binary can be installed here from the package registries this project uses: see
docs/monitoring.md). Checks that the YAML parses, that every pipeline names defined
components of known types, that the keys of the `load_balancing` exporter are the ones its
Config (collector-contrib exporter/loadbalancingexporter/config.go) has and pass its
Validate rules, that retryscope gets logs and traces but not metrics, and that the routing
attributes are on every record the real agents export (the committed captures in
tests/fixtures/agents/*/otlp-*/).

  python3 -m unittest dashboards/otelcol/test_configs.py
"""

import glob
import json
import os
import unittest

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
CAPTURES = os.path.join(HERE, "..", "..", "tests", "fixtures", "agents")

KNOWN = {
    "receivers": {"otlp"},
    "processors": {"memory_limiter", "batch"},
    "exporters": {"otlp_grpc", "otlp_http", "otlp", "otlphttp", "load_balancing",
                  "loadbalancing"},
}
# loadbalancingexporter Config (mapstructure keys) and its routing keys
LB_KEYS = {"protocol", "resolver", "routing_key", "routing_attributes", "timeout",
           "retry_on_failure", "sending_queue"}
LB_ROUTING = {"service", "traceID", "metric", "resource", "streamID", "attributes"}
LB_RESOLVERS = {"static", "dns", "k8s", "aws_cloud_map"}


def load(name):
    with open(os.path.join(HERE, name), encoding="utf-8") as f:
        return yaml.safe_load(f)


def kind(component_id):
    return component_id.split("/", 1)[0]


def retryscope_exporters(cfg):
    return {e for e in cfg["exporters"] if e.endswith("/retryscope")}


class Configs(unittest.TestCase):
    FILES = ("fanout.yaml", "loadbalancing.yaml")

    def test_pipelines_use_defined_components_of_known_types(self):
        for f in self.FILES:
            cfg = load(f)
            for section, known in KNOWN.items():
                for cid in cfg.get(section) or {}:
                    self.assertIn(kind(cid), known, f"{f}: {section} {cid}")
            for name, p in cfg["service"]["pipelines"].items():
                self.assertIn(kind(name), {"logs", "traces", "metrics"}, f)
                for section in ("receivers", "processors", "exporters"):
                    for cid in p.get(section) or []:
                        self.assertIn(cid, cfg.get(section) or {}, f"{f}: {name} {cid}")

    def test_retryscope_gets_logs_and_traces_not_metrics(self):
        for f in self.FILES:
            cfg = load(f)
            ours = retryscope_exporters(cfg)
            self.assertTrue(ours, f)
            pipes = cfg["service"]["pipelines"]
            for signal in ("logs", "traces"):
                self.assertTrue(ours & set(pipes[signal]["exporters"]), f"{f}: {signal}")
                self.assertIn("otlp_grpc/backend", pipes[signal]["exporters"], f)
            self.assertFalse(ours & set(pipes["metrics"]["exporters"]), f)

    def test_load_balancing_keys_and_validate_rules(self):
        cfg = load("loadbalancing.yaml")
        lb = cfg["exporters"]["load_balancing/retryscope"]
        self.assertLessEqual(set(lb), LB_KEYS)
        self.assertIn(lb["routing_key"], LB_ROUTING)
        # Validate(): routing_attributes if and only if routing_key is attributes
        self.assertEqual(lb["routing_key"] == "attributes", bool(lb.get("routing_attributes")))
        self.assertEqual(set(lb["protocol"]), {"otlp"})
        self.assertNotIn("endpoint", lb["protocol"]["otlp"])  # set per backend by the exporter
        self.assertEqual(len(set(lb["resolver"]) & LB_RESOLVERS), 1)
        self.assertLessEqual(set(lb["resolver"]), LB_RESOLVERS)
        self.assertTrue(lb["resolver"]["static"]["hostnames"])

    def test_routing_attributes_are_on_every_agent_record(self):
        # Each session must hash to one instance: every log record the real agents exported
        # carries one of the routing attributes (resource or record), except Codex's
        # attribute-less internal "flushing OTEL metrics" log line.
        attrs_wanted = self.routing_attributes()
        paths = glob.glob(os.path.join(CAPTURES, "*", "otlp-*", "otlp", "*-v1-logs.json"))
        self.assertTrue(paths)
        for path in paths:
            with open(path, encoding="utf-8") as f:
                body = json.load(f)
            for rl in body["resourceLogs"]:
                res = {a["key"] for a in rl.get("resource", {}).get("attributes", [])}
                for sl in rl.get("scopeLogs", []):
                    for rec in sl.get("logRecords", []):
                        keys = res | {a["key"] for a in rec.get("attributes", [])}
                        if not rec.get("attributes") and "flushing" in json.dumps(rec.get("body")):
                            continue
                        self.assertTrue(keys & attrs_wanted,
                                        f"{path}: {json.dumps(rec)[:200]}")


    def test_routing_attributes_are_on_every_gemini_and_claude_span(self):
        # gemini-cli's and Claude Code's spans carry the session too; Codex's ~1,000 internal
        # spans mostly do not (retryscope reads none of them: its log records suffice).
        attrs_wanted = self.routing_attributes()
        for client in ("gemini-cli", "claude-code"):
            paths = glob.glob(os.path.join(CAPTURES, client, "otlp-*", "otlp", "*-v1-traces.json"))
            self.assertTrue(paths, client)
            for path in paths:
                with open(path, encoding="utf-8") as f:
                    body = json.load(f)
                for rs in body["resourceSpans"]:
                    res = {a["key"] for a in rs.get("resource", {}).get("attributes", [])}
                    for ss in rs.get("scopeSpans", []):
                        for sp in ss.get("spans", []):
                            keys = res | {a["key"] for a in sp.get("attributes", [])}
                            self.assertTrue(keys & attrs_wanted, f"{path}: {sp.get('name')}")

    @staticmethod
    def routing_attributes():
        return set(load("loadbalancing.yaml")["exporters"]["load_balancing/retryscope"]
                   ["routing_attributes"])


if __name__ == "__main__":
    unittest.main()
