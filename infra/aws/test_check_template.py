#!/usr/bin/env python3
# Tests of the template lint: the real template passes, and each kind of breakage is found (timing table mismatch, a broken rule, a broken rule in one samconfig environment only).
# Usage: .venv/bin/python -m unittest infra/aws/test_check_template.py   (run by infra/aws/lint.sh)
import copy
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_template import ROOT, Checker, Timings, evaluate, overrides  # noqa: E402
from translate import expand  # noqa: E402

TEMPLATE = os.path.join(ROOT, "template.yaml")
SAMCONFIG = os.path.join(ROOT, "samconfig.toml")


class TemplateLint(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.expanded = expand(TEMPLATE)
        cls.timings = Timings()

    def findings(self, template=None, params=None, label="defaults", timings=None):
        return Checker(template or self.expanded, params or {}, label, timings or self.timings).run()

    def test_the_template_and_every_environment_pass(self):
        self.assertEqual(self.findings(), [])
        for env, params in overrides(SAMCONFIG).items():
            self.assertEqual(self.findings(params=params, label=env), [], env)

    def test_a_value_that_differs_from_the_table_is_found(self):
        t = copy.deepcopy(self.expanded)
        t["Resources"]["Aggregator"]["Properties"]["Timeout"] = 61
        found = self.findings(t)
        self.assertTrue(any("aggregator.timeout_secs" in f and "61" in f for f in found), found)

    def test_a_broken_rule_is_found_naming_the_values(self):
        t = copy.deepcopy(self.expanded)
        t["Resources"]["TasksQueue"]["Properties"]["VisibilityTimeout"] = 600
        found = [f for f in self.findings(t) if "rule broken" in f]
        self.assertEqual(len(found), 1, found)
        self.assertIn("queues.tasks.visibility_timeout_secs=600", found[0])
        self.assertIn("worker.timeout_secs=120", found[0])

    def test_an_environment_override_that_breaks_a_rule_is_found_for_that_environment(self):
        found = self.findings(params={"WorkerMaxConcurrency": "1"}, label="staging")
        self.assertTrue(any(f.startswith("[staging]") and "max_concurrency >= 2" in f for f in found), found)

    def role_statements(self, t, role="WorkerRole"):
        return t["Resources"][role]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]

    def test_only_the_xray_write_actions_may_have_resource_star(self):
        t = copy.deepcopy(self.expanded)
        traces = next(st for st in self.role_statements(t) if st.get("Sid") == "Traces")
        self.assertEqual(sorted(traces["Action"]), ["xray:PutTelemetryRecords", "xray:PutTraceSegments"])
        self.assertEqual(traces["Resource"], "*")
        # Another action in the same statement makes its "*" a finding.
        traces["Action"] = traces["Action"] + ["xray:GetTraceSummaries"]
        found = self.findings(t)
        self.assertTrue(any("WorkerRole/worker" in f and "Resource '*'" in f for f in found), found)
        # So does "*" on any other statement.
        t = copy.deepcopy(self.expanded)
        sqs = next(st for st in self.role_statements(t) if st.get("Sid") == "ConsumeTasks")
        sqs["Resource"] = "*"
        found = self.findings(t)
        self.assertTrue(any("WorkerRole/worker" in f and "Resource '*'" in f for f in found), found)
        # And an action wildcard, even on X-Ray.
        t = copy.deepcopy(self.expanded)
        traces = next(st for st in self.role_statements(t) if st.get("Sid") == "Traces")
        traces["Action"] = ["xray:*"]
        found = self.findings(t)
        self.assertTrue(any("Action 'xray:*'" in f for f in found), found)

    def test_every_function_traces_actively_and_may_write_segments(self):
        t = copy.deepcopy(self.expanded)
        del t["Resources"]["Aggregator"]["Properties"]["TracingConfig"]
        found = self.findings(t)
        self.assertTrue(any(f.startswith("[defaults] Aggregator: TracingConfig.Mode") for f in found), found)
        t = copy.deepcopy(self.expanded)
        statements = self.role_statements(t, "AggregatorRole")
        statements[:] = [st for st in statements if st.get("Sid") != "Traces"]
        found = self.findings(t)
        self.assertTrue(any("Aggregator: role AggregatorRole lacks" in f for f in found), found)

    def test_an_alarm_that_does_not_say_where_to_look_first_is_found(self):
        t = copy.deepcopy(self.expanded)
        t["Resources"]["BreakerOpenAlarm"]["Properties"]["AlarmDescription"] = "The breaker opened."
        found = self.findings(t)
        self.assertTrue(any("BreakerOpenAlarm: AlarmDescription" in f for f in found), found)

    def test_the_table_itself_satisfies_every_rule(self):
        for rule in self.timings.rules:
            self.assertTrue(evaluate(rule["check"], self.timings.values), rule["check"])

    def test_rules_evaluate_arithmetic_and_comparisons_only(self):
        values = {"a.b": 2, "c": 3}
        self.assertTrue(evaluate("a.b * 3 >= c + 1 and min(a.b, c) == 2", values))
        self.assertFalse(evaluate("a.b > c", values))
        with self.assertRaises(Exception):
            evaluate("__import__('os')", values)
        with self.assertRaises(Exception):
            evaluate("a.b > unknown", values)


if __name__ == "__main__":
    unittest.main()
