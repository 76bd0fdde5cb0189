#!/usr/bin/env python3
# Tests of the template lint: the real template passes, and each kind of breakage is found (timing table mismatch, a broken rule, a broken rule in one samconfig environment only, each kind of timing and capacity rule, the stream's on-failure destination, the sweep and its index, the gateway's instance cap).
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
        t["Resources"]["TasksQueue"]["Properties"]["VisibilityTimeout"] = 300
        found = [f for f in self.findings(t) if "rule broken" in f]
        self.assertEqual(len(found), 1, found)
        self.assertIn("queues.tasks.visibility_timeout_secs=300", found[0])
        self.assertIn("worker.timeout_secs=60", found[0])

    def test_an_environment_override_that_breaks_a_rule_is_found_for_that_environment(self):
        found = self.findings(params={"WorkerMaxConcurrency": "1"}, label="staging")
        self.assertTrue(any(f.startswith("[staging]") and "max_concurrency >= 2" in f for f in found), found)

    def broken(self, found, needle):
        """The findings that report a broken rule whose text holds `needle`."""
        return [f for f in found if "rule broken" in f and needle in f]

    def test_a_retry_that_cannot_come_back_inside_the_deadline_is_found(self):
        found = self.findings(params={"MaxReceiveCount": "10"}, label="staging")
        self.assertTrue(self.broken(found, "queues.max_receive_count * worker.retry_visibility_secs"), found)

    def test_a_worker_timeout_too_close_to_the_deadline_is_found(self):
        t = copy.deepcopy(self.expanded)
        t["Resources"]["Worker"]["Properties"]["Timeout"] = 110
        t["Resources"]["TasksQueue"]["Properties"]["VisibilityTimeout"] = 660
        found = self.findings(t, label="staging")
        self.assertTrue(self.broken(found, "worker.timeout_secs + worker.handback_delay_secs"), found)
        self.assertTrue(self.broken(found, "aggregator.lease_secs >"), "the lease must outlive the worker too")

    def test_a_sweep_period_long_against_the_deadline_is_found(self):
        t = copy.deepcopy(self.expanded)
        t["Resources"]["SweeperSchedule"]["Properties"]["ScheduleExpression"] = "rate(5 minutes)"
        found = self.findings(t, label="staging")
        self.assertTrue(self.broken(found, "sweep.period_secs * 2 <= conversation.deadline_secs"), found)
        self.assertIn("sweep.period_secs=300", self.broken(found, "sweep.period_secs * 2")[0])

    def test_a_sweep_that_outlives_its_period_or_its_lease_is_found(self):
        t = copy.deepcopy(self.expanded)
        t["Resources"]["Sweeper"]["Properties"]["Timeout"] = 120
        found = self.findings(t, label="staging")
        self.assertTrue(self.broken(found, "sweep.timeout_secs <= sweep.period_secs"), found)
        self.assertTrue(self.broken(found, "aggregator.lease_secs >"), found)

    def test_table_only_rules_are_checked_on_the_table(self):
        for key, value, rule in [
            ("orchestrator.lease_secs", 20, "orchestrator.lease_secs > orchestrator.timeout_secs"),
            ("conversation.rearm_secs", 1000, "conversation.rearm_secs <= 900"),
            ("worker.conversation_margin_secs", 1, "worker.conversation_margin_secs >= worker.safety_margin_secs"),
        ]:
            timings = copy.deepcopy(self.timings)
            timings.values[key] = value
            found = self.findings(timings=timings)
            self.assertTrue(self.broken(found, rule), (key, found))

    def test_workers_that_can_call_more_than_the_gateway_or_the_shop_holds_are_found(self):
        found = self.findings(params={"GatewayReservedConcurrency": "50", "ShopToolsReservedConcurrency": "50"},
                              label="staging")
        self.assertTrue(self.broken(found, "<= gateway.reserved_concurrency"), found)
        self.assertTrue(self.broken(found, "<= shop.reserved_concurrency"), found)
        found = self.findings(params={"ShopToolsReservedConcurrency": "500"}, label="staging")
        self.assertTrue(self.broken(found, "gateway.reserved_concurrency >= 0 and"), "an unreserved gateway before a reserved shop")
        fine = {"WorkerMaxConcurrency": "10", "WorkerBatchSize": "2", "GatewayReservedConcurrency": "100",
                "ShopToolsReservedConcurrency": "100"}
        self.assertEqual(self.findings(params=fine, label="staging"), [])

    def test_a_stream_mapping_without_a_watched_on_failure_destination_is_found(self):
        t = copy.deepcopy(self.expanded)
        del t["Resources"]["AggregatorConversationFinished"]["Properties"]["DestinationConfig"]
        self.assertTrue(any("on-failure destination" in f for f in self.findings(t)))
        t = copy.deepcopy(self.expanded)
        del t["Resources"]["AggregatorStreamFailuresAlarm"]
        self.assertTrue(any("no alarm watches" in f for f in self.findings(t)))
        t = copy.deepcopy(self.expanded)
        statements = t["Resources"]["AggregatorRole"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
        statements[:] = [st for st in statements if st.get("Sid") != "StreamOnFailure"]
        self.assertTrue(any("may not send to its on-failure destination" in f for f in self.findings(t)))

    def test_the_sweep_needs_its_index_its_schedule_and_the_index_in_its_role(self):
        t = copy.deepcopy(self.expanded)
        del t["Resources"]["Table"]["Properties"]["GlobalSecondaryIndexes"]
        self.assertTrue(any("no sweep index" in f for f in self.findings(t)))
        t = copy.deepcopy(self.expanded)
        statements = t["Resources"]["SweeperRole"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
        statements[:] = [st for st in statements if st.get("Sid") != "SweepIndex"]
        self.assertTrue(any("does not name the sweep index" in f for f in self.findings(t)))
        t = copy.deepcopy(self.expanded)
        del t["Resources"]["SweeperSchedule"]
        found = self.findings(t)
        self.assertTrue(any("no schedule invokes" in f for f in found), found)

    def test_a_gateway_not_told_its_instance_cap_is_found(self):
        t = copy.deepcopy(self.expanded)
        del t["Resources"]["ToolGateway"]["Properties"]["Environment"]["Variables"]["GATEWAY_INSTANCE_CAP"]
        self.assertTrue(any("GATEWAY_INSTANCE_CAP" in f for f in self.findings(t)))

    def test_rate_expressions_read_as_seconds(self):
        checker = Checker(self.expanded, {}, "defaults", self.timings)
        self.assertEqual(checker.number("rate(1 minute)"), 60)
        self.assertEqual(checker.number("rate(2 hours)"), 7200)
        self.assertIsNone(checker.number("cron(0 * * * ? *)"))

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
