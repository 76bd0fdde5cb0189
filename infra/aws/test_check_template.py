#!/usr/bin/env python3
# Tests of the template lint: the real template passes, and each kind of breakage is found (timing table mismatch, a broken rule, a broken rule in one samconfig environment only, each kind of timing and capacity rule, the stream's on-failure destination, the sweep and its index, the gateway's instance cap, the API's open routes, customers' list and CORS, the pending approvals' index and its readers, Bedrock's grants with LlmAuth=sigv4, a role that can reach what it does not need, a public shop, a prod environment without authentication, the streaming API's URL, timeout and variables, a public URL without both scoped permissions, a queue URL given without the permission to send, a local wiring that differs from the template's).
# Usage: .venv/bin/python -m unittest infra/aws/test_check_template.py   (run by infra/aws/lint.sh)
#        SWARM_WIRING_JSON=wiring.json ... also holds that local wiring (`swarm-local wiring --json`) against the template.
import copy
import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_allowlists import gateway_roles  # noqa: E402
from check_roles import ROLE_NEEDS, check_wiring, wiring  # noqa: E402
from check_template import Checker, overrides  # noqa: E402
from timing_table import ROOT, Timings, evaluate  # noqa: E402
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
            self.assertEqual(self.findings(self.expanded, params=params, label=env), [], env)

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
        found = self.findings(self.expanded, params={"WorkerMaxConcurrency": "1"}, label="staging")
        self.assertTrue(any(f.startswith("[staging]") and "max_concurrency >= 2" in f for f in found), found)

    def test_an_idle_expiry_shorter_than_an_approval_s_life_and_execute_window_is_found(self):
        # 24 h: an approval asked for in the turn (86400 s) plus its execute window (900 s) outlives it.
        found = self.findings(self.expanded, params={"ConversationIdleExpirySecs": "86400"}, label="staging")
        broken = [f for f in found if "rule broken" in f and "conversation.idle_expiry_secs >=" in f]
        self.assertEqual(len(broken), 1, found)
        self.assertTrue(broken[0].startswith("[staging]"), broken)
        self.assertIn("conversation.idle_expiry_secs=86400", broken[0])
        self.assertIn("money.approval_expiry_secs=86400", broken[0])
        self.assertIn("money.approval_execute_within_secs=900", broken[0])
        # Longer is fine; the template's default must be the table's.
        self.assertEqual(self.findings(self.expanded, params={"ConversationIdleExpirySecs": "172800"}, label="staging"), [])
        t = copy.deepcopy(self.expanded)
        t["Parameters"]["ConversationIdleExpirySecs"]["Default"] = 90000
        found = self.findings(t)
        self.assertTrue(any("conversation.idle_expiry_secs: the template holds 90000" in f for f in found), found)

    def test_the_orchestrator_is_given_the_idle_expiry(self):
        env = self.expanded["Resources"]["Orchestrator"]["Properties"]["Environment"]["Variables"]
        self.assertEqual(env["CONVERSATION_IDLE_EXPIRY_SECS"], {"Ref": "ConversationIdleExpirySecs"})

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
    def broken(self, found, needle):
        """The findings that report a broken rule whose text holds `needle`."""
        return [f for f in found if "rule broken" in f and needle in f]

    def test_a_retry_that_cannot_come_back_inside_the_deadline_is_found(self):
        found = self.findings(self.expanded, params={"MaxReceiveCount": "10"}, label="staging")
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
        found = self.findings(self.expanded, params={"GatewayReservedConcurrency": "50", "ShopToolsReservedConcurrency": "50"},
                              label="staging")
        self.assertTrue(self.broken(found, "<= gateway.reserved_concurrency"), found)
        self.assertTrue(self.broken(found, "<= shop.reserved_concurrency"), found)
        found = self.findings(self.expanded, params={"ShopToolsReservedConcurrency": "500"}, label="staging")
        self.assertTrue(self.broken(found, "gateway.reserved_concurrency >= 0 and"), "an unreserved gateway before a reserved shop")
        # 10 x 2 x 4 tool calls of the workers + 10 x 1 x 4 of the side effects' workers (its default): 120.
        fine = {"WorkerMaxConcurrency": "10", "WorkerBatchSize": "2", "GatewayReservedConcurrency": "120",
                "ShopToolsReservedConcurrency": "120"}
        self.assertEqual(self.findings(self.expanded, params=fine, label="staging"), [])

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


class LeastPrivilege(unittest.TestCase):
    """The IAM test: the expanded template, each role against ROLE_NEEDS, and nothing public around the gateway."""

    @classmethod
    def setUpClass(cls):
        cls.expanded = expand(TEMPLATE)
        cls.timings = Timings()

    def findings(self, template, params=None, label="defaults"):
        return Checker(template, params or {}, label, self.timings).run()

    def statements(self, t, role):
        return t["Resources"][role]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]

    def statement(self, t, role, sid):
        return next(st for st in self.statements(t, role) if isinstance(st, dict) and st.get("Sid") == sid)

    def test_every_role_is_in_the_table_and_reaches_only_what_it_needs(self):
        roles = {k for k, r in self.expanded["Resources"].items() if r["Type"] == "AWS::IAM::Role"}
        self.assertEqual(roles, set(ROLE_NEEDS))
        for env, params in [("defaults", {}), *overrides(SAMCONFIG).items()]:
            self.assertEqual(self.findings(self.expanded, params, env), [], env)

    def test_a_support_worker_that_can_send_to_the_refund_queue_is_found(self):
        t = copy.deepcopy(self.expanded)
        st = self.statement(t, "WorkerRole", "EnqueueDependentsAndHandBack")
        st["Resource"] = [st["Resource"], {"Fn::GetAtt": ["RefundQueue", "Arn"]}]
        self.assertIn("[defaults] WorkerRole: can send to RefundQueue without needing it", self.findings(t))
        t = copy.deepcopy(self.expanded)
        st = self.statement(t, "DlqConsumerRole", "EnqueueDependentsAndDeadlines")
        st["Resource"] = [st["Resource"], {"Fn::GetAtt": ["TasksDeadLetterQueue", "Arn"]}]
        self.assertIn("[defaults] DlqConsumerRole: can send to TasksDeadLetterQueue without needing it", self.findings(t))

    def test_a_role_that_can_read_the_refund_token_or_another_functions_secret_is_found(self):
        t = copy.deepcopy(self.expanded)
        self.statement(t, "WorkerRole", "Secrets")["Resource"].append({"Ref": "RefundTokenSecret"})
        self.statements(t, "DlqConsumerRole").append(
            {"Effect": "Allow", "Action": "secretsmanager:GetSecretValue", "Resource": {"Ref": "SupportTokenSecret"}})
        found = self.findings(t)
        self.assertIn("[defaults] WorkerRole: can read the secret RefundTokenSecret without needing it", found)
        self.assertIn("[defaults] DlqConsumerRole: can read the secret SupportTokenSecret without needing it", found)

    def test_a_conditional_grant_counts_where_its_condition_holds(self):
        t = copy.deepcopy(self.expanded)
        self.statements(t, "ShopToolsRole").append({"Fn::If": ["GatewayUrlIsIam", {
            "Effect": "Allow", "Action": "lambda:InvokeFunctionUrl", "Resource": {"Fn::GetAtt": ["ToolGateway", "Arn"]}},
            {"Ref": "AWS::NoValue"}]})
        self.assertEqual([f for f in self.findings(t) if "ShopToolsRole" in f], [], "NONE by default: no grant")
        found = self.findings(t, {"GatewayUrlAuth": "AWS_IAM"}, "iam")
        self.assertIn("[iam] ShopToolsRole: can invoke ToolGateway without needing it", found)

    def test_a_table_write_not_scoped_by_its_key_prefix_is_found(self):
        t = copy.deepcopy(self.expanded)
        del self.statement(t, "AggregatorRole", "WriteConversationItems")["Condition"]
        st = self.statement(t, "WorkerRole", "WriteConversationItems")
        st["Condition"]["ForAllValues:StringLike"]["dynamodb:LeadingKeys"] = ["CONV#*", "PRINCIPAL#*"]
        found = self.findings(t)
        self.assertIn("[defaults] AggregatorRole: can write table items keyed <any item> without needing it", found)
        self.assertIn("[defaults] WorkerRole: can write table items keyed PRINCIPAL#* without needing it", found)
        # Another table is named: its writes need their own line in ROLE_NEEDS.
        t["Resources"]["LedgerTable"] = copy.deepcopy(t["Resources"]["Table"])
        self.statements(t, "ShopToolsRole").append(
            {"Effect": "Allow", "Action": "dynamodb:PutItem", "Resource": {"Fn::GetAtt": ["LedgerTable", "Arn"]}})
        self.assertIn("[defaults] ShopToolsRole: can write table items keyed LedgerTable:<any item> without needing it",
                      self.findings(t))

    def test_xray_is_the_one_star_resource_allowed(self):
        t = copy.deepcopy(self.expanded)
        self.statements(t, "WorkerRole").append(
            {"Effect": "Allow", "Action": ["xray:PutTraceSegments", "xray:PutTelemetryRecords"], "Resource": "*"})
        self.assertEqual(self.findings(t), [])
        self.statements(t, "WorkerRole").append(
            {"Effect": "Allow", "Action": ["xray:PutTraceSegments", "sqs:SendMessage"], "Resource": "*"})
        self.assertTrue(any("WorkerRole/worker: Resource '*'" in f for f in self.findings(t)), self.findings(t))

    def test_a_role_missing_from_the_table_is_found(self):
        t = copy.deepcopy(self.expanded)
        t["Resources"]["ExtraRole"] = copy.deepcopy(t["Resources"]["ShopToolsRole"])
        del t["Resources"]["ExtraRole"]["Condition"]
        self.assertIn("[defaults] ExtraRole: not in ROLE_NEEDS: say what this role needs before granting it anything",
                      self.findings(t))

    def test_an_unauthenticated_or_public_shop_url_is_found(self):
        t = copy.deepcopy(self.expanded)
        t["Resources"]["ShopToolsFunctionUrl"]["Properties"]["AuthType"] = "NONE"
        t["Resources"]["ShopToolsUrlPermission"] = {"Type": "AWS::Lambda::Permission", "Condition": "DeployShop",
            "Properties": {"Action": "lambda:InvokeFunctionUrl", "FunctionName": {"Ref": "ShopTools"},
                           "Principal": "*", "FunctionUrlAuthType": "NONE"}}
        found = self.findings(t)
        self.assertIn("[defaults] ShopToolsFunctionUrl: the demo shop's function URL has AuthType 'NONE', want AWS_IAM", found)
        self.assertIn("[defaults] ShopToolsUrlPermission: grants ShopTools to everyone (Principal '*')", found)

    def test_the_gateway_must_be_able_to_invoke_the_shop_with_both_actions(self):
        t = copy.deepcopy(self.expanded)
        st = self.statements(t, "ToolGatewayRole")
        invoke = next(x for x in st if isinstance(x, dict) and "Fn::If" in x and x["Fn::If"][1].get("Sid") == "InvokeShop")
        invoke["Fn::If"][1]["Action"] = ["lambda:InvokeFunctionUrl"]
        self.assertIn("[defaults] ToolGatewayRole: cannot lambda:invokefunction on ShopTools: the gateway could not "
                      "reach the demo shop", self.findings(t))

    def test_prod_refuses_no_authentication_the_demo_shop_and_a_public_gateway(self):
        prod = overrides(SAMCONFIG)["prod"]
        self.assertEqual(self.findings(self.expanded, prod, "prod"), [])
        found = self.findings(self.expanded, {**prod, "AuthMode": "none"}, "prod")
        self.assertEqual([f for f in found if "rule" in f],
                         ["[prod] rule ProdNeedsAuthentication: Stage=prod refuses AuthMode=none (the request body "
                          "would pick the customer); use jwt or iam."])
        found = self.findings(self.expanded, {**prod, "DeployDemoShop": "true", "GatewayUrlAuth": "NONE"}, "prod")
        self.assertTrue(any("rule ProdDeploysNoDemoShop" in f for f in found), found)
        self.assertTrue(any("rule ProdGatewayNotPublic" in f for f in found), found)
        # A dev environment may run without authentication.
        self.assertEqual(self.findings(self.expanded, {"Stage": "dev", "AuthMode": "none"}, "dev"), [])
        found = self.findings(self.expanded, {"DeployDemoShop": "false", "ShopToolsUrl": "https://t.example/mcp"}, "ext")
        self.assertTrue(any("ShopToolsTokenSecretArn" in f for f in found), found)

    def test_the_streaming_api_s_timeout_is_checked_against_the_deadline(self):
        def streaming(deadline, timeout):
            found = self.findings(self.expanded, {"DeadlineSecs": deadline, "StreamingApiTimeoutSecs": timeout}, "env")
            return [f for f in found if "StreamingApi" in f]
        self.assertEqual(streaming("120", "200"), [])
        self.assertEqual(streaming("180", "200"), ["[env] StreamingApi: timeout 200 s < DeadlineSecs 180 + 80 s: a chat "
                                                   "completion is cut before its turn's deadline answer reaches the client"])
        self.assertEqual(streaming("820", "900"), [])
        self.assertEqual(len(streaming("821", "900")), 1)
        t = copy.deepcopy(self.expanded)
        t["Resources"]["StreamingApi"]["Properties"]["Timeout"] = 901
        self.assertIn("[defaults] StreamingApi: timeout 901 s > Lambda's 900 s", self.findings(t))

    def test_the_streaming_url_streams_and_the_function_gets_the_orchestrator_s_variables(self):
        t = copy.deepcopy(self.expanded)
        del t["Resources"]["StreamingApiUrl"]["Properties"]["InvokeMode"]
        env = t["Resources"]["StreamingApi"]["Properties"]["Environment"]["Variables"]
        env["APPROVAL_KEY_SECRET_ARN"] = {"Ref": "ApprovalKeySecret"}
        del env["JWT_AUDIENCE"]
        env["DEADLINE_SECS"] = 300
        found = self.findings(t)
        self.assertTrue(any("InvokeMode RESPONSE_STREAM" in f for f in found), found)
        for var in ("APPROVAL_KEY_SECRET_ARN", "JWT_AUDIENCE", "DEADLINE_SECS"):
            self.assertTrue(any(f"StreamingApi: {var} is " in f for f in found), (var, found))

    def test_a_public_url_needs_both_scoped_permissions_and_the_streaming_one_a_check_in_the_function(self):
        t = copy.deepcopy(self.expanded)
        del t["Resources"]["StreamingApiUrlPublicInvokePermission"]
        t["Resources"]["ToolGatewayUrlPublicInvokePermission"]["Properties"].pop("InvokedViaFunctionUrl")
        found = self.findings(t)
        self.assertIn("[defaults] StreamingApiUrl: a NONE URL needs a public lambda:invokefunction permission (since "
                      "October 2025 Lambda asks for both)", found)
        self.assertIn("[defaults] ToolGatewayUrlPublicInvokePermission: a public permission (lambda:InvokeFunction) not "
                      "limited to a NONE function URL", found)
        # AuthMode=iam makes the URL AWS_IAM (no public permission at all); a NONE URL with iam is found.
        self.assertEqual(self.findings(self.expanded, params={"AuthMode": "iam"}), [])
        t = copy.deepcopy(self.expanded)
        t["Resources"]["StreamingApiUrl"]["Properties"]["AuthType"] = "NONE"
        for name in ("StreamingApiUrlPublicPermission", "StreamingApiUrlPublicInvokePermission"):
            del t["Resources"][name]["Condition"]
        self.assertIn("[defaults] StreamingApiUrl: AuthMode=iam: the streaming URL must be AWS_IAM (callers sign, as "
                      "on the HTTP API)", self.findings(t, params={"AuthMode": "iam"}))
        jwt = {"AuthMode": "jwt", "JwtIssuer": "https://issuer.example.com", "JwtAudience": "app"}
        self.assertEqual(self.findings(self.expanded, params=jwt), [])
        t = copy.deepcopy(self.expanded)
        t["Resources"]["StreamingApi"]["Properties"]["Environment"]["Variables"]["JWT_ISSUER"] = "https://other.example.com"
        found = self.findings(t, params=jwt)
        self.assertTrue(any("not the HTTP API authorizer's issuer and audience" in f for f in found), found)

    def test_the_api_s_open_routes_customers_list_index_and_cors_are_checked(self):
        self.assertEqual(self.findings(self.expanded), [])
        t = copy.deepcopy(self.expanded)
        del t["Resources"]["HealthRoute"]
        t["Resources"]["OpenApiRoute"]["Properties"]["AuthorizationType"] = "AWS_IAM"
        found = self.findings(t)
        self.assertTrue(any("no route GET /health" in f for f in found), found)
        self.assertTrue(any("GET /openapi.json must need no credential" in f for f in found), found)
        t = copy.deepcopy(self.expanded)
        t["Resources"]["ListConversationsRoute"]["Properties"]["AuthorizationType"] = "AWS_IAM"
        t["Resources"]["Table"]["Properties"]["GlobalSecondaryIndexes"] = [
            i for i in t["Resources"]["Table"]["Properties"]["GlobalSecondaryIndexes"] if i["IndexName"] != "customer"]
        statements = self.statements(t, "OrchestratorRole")
        statements[:] = [st for st in statements if not (isinstance(st, dict) and st.get("Sid") == "ListCustomersConversations")]
        t["Resources"]["Orchestrator"]["Properties"]["Environment"]["Variables"]["CORS_ALLOWED_ORIGINS"] = "*"
        found = self.findings(t)
        for expected in ("not authorised as POST /conversations", "no customers' index",
                         "does not name the customers' index", "CORS_ALLOWED_ORIGINS is not"):
            self.assertTrue(any(expected in f for f in found), (expected, found))

    def test_the_pending_approvals_index_and_its_readers_are_checked(self):
        t = copy.deepcopy(self.expanded)
        t["Resources"]["Table"]["Properties"]["GlobalSecondaryIndexes"] = [
            i for i in t["Resources"]["Table"]["Properties"]["GlobalSecondaryIndexes"] if i["IndexName"] != "pending"]
        for role, sid in (("OrchestratorRole", "ListPendingApprovals"), ("SweeperRole", "PendingApprovalsIndex")):
            statements = self.statements(t, role)
            statements[:] = [st for st in statements if not (isinstance(st, dict) and st.get("Sid") == sid)]
        found = self.findings(t)
        self.assertTrue(any("no pending approvals' index" in f for f in found), found)
        self.assertEqual(sum("does not name the pending approvals' index" in f for f in found), 2, found)

    def test_with_bedrock_the_llm_roles_invoke_the_model_and_read_no_key(self):
        self.assertEqual(self.findings(self.expanded, params={"LlmAuth": "sigv4"}, label="sigv4"), [])
        t = copy.deepcopy(self.expanded)
        statements = self.statements(t, "WorkerRole")
        statements[:] = [st for st in statements if "Bedrock" not in str(st)]
        found = self.findings(t, params={"LlmAuth": "sigv4"}, label="sigv4")
        self.assertTrue(any("WorkerRole" in f and "cannot invoke the configured model" in f for f in found), found)
        self.assertEqual(self.findings(t, {}), [], "with a key (the default) no Bedrock grant is needed")


class Allowlists(unittest.TestCase):
    """Gateway roles name their tools; a pipe reading a stream has a dead-letter destination."""

    @classmethod
    def setUpClass(cls):
        cls.expanded = expand(TEMPLATE)
        cls.timings = Timings()

    def findings(self, template):
        return Checker(template, {}, "defaults", self.timings).run()

    def gateway_config(self, t):
        return t["Resources"]["ToolGateway"]["Properties"]["Environment"]["Variables"]["GATEWAY_CONFIG"]["Fn::Sub"]

    def test_every_role_of_the_template_names_its_tools(self):
        roles = gateway_roles(Checker(self.expanded, {}, "defaults", self.timings))
        self.assertEqual(set(roles), {"support", "refund", "planner"})
        self.assertNotIn("shop__refund", roles["support"]["tools"])
        self.assertIn("shop__refund", roles["refund"]["tools"])
        for name, role in roles.items():
            self.assertTrue(role["tools"], name)
            self.assertFalse(any("*" in tool for tool in role["tools"]), (name, role))
            self.assertEqual(role["deny"], [], name)

    def test_a_wildcard_role_tool_list_is_refused(self):
        t = copy.deepcopy(self.expanded)
        config = self.gateway_config(t)
        config[0] = config[0].replace('"support": {"token": "${!env:SUPPORT_TOKEN}", "tools": [',
                                      '"support": {"token": "${!env:SUPPORT_TOKEN}", "tools": ["ev__*", ', 1)
        self.assertIn("ev__*", config[0])
        found = self.findings(t)
        self.assertIn("[defaults] GATEWAY_CONFIG role support: tool list holds the wildcard 'ev__*'; name each tool "
                      "(an allowlist)", found)
        self.assertEqual(len(found), 1, found)

    def test_a_wildcard_minus_a_deny_is_refused(self):
        t = copy.deepcopy(self.expanded)
        config = self.gateway_config(t)
        config[0] = config[0].replace('"planner": {"token": "${!env:PLANNER_TOKEN}", "tools": [',
                                      '"planner": {"token": "${!env:PLANNER_TOKEN}", "deny": ["shop__refund"], '
                                      '"tools": ["shop__*", ', 1)
        found = self.findings(t)
        self.assertTrue(any("GATEWAY_CONFIG role planner: tool list holds the wildcard 'shop__*'" in f for f in found),
                        found)
        self.assertTrue(any("GATEWAY_CONFIG role planner: has a deny list ['shop__refund']" in f for f in found), found)

    def test_a_pipe_without_a_dead_letter_destination_is_refused(self):
        t = copy.deepcopy(self.expanded)
        del t["Resources"]["HandoffPipe"]["Properties"]["SourceParameters"]["DynamoDBStreamParameters"][
            "DeadLetterConfig"]
        found = self.findings(t)
        self.assertIn("[defaults] HandoffPipe: no SQS dead-letter destination (DeadLetterConfig.Arn): a record given "
                      "up would vanish", found)

    def test_a_pipe_dead_letter_queue_nobody_watches_or_the_pipe_may_not_send_to_is_refused(self):
        t = copy.deepcopy(self.expanded)
        alarms = [k for k, r in t["Resources"].items() if r["Type"] == "AWS::CloudWatch::Alarm"
                  and any(d.get("Value") == {"Fn::GetAtt": ["HandoffDeadLetterQueue", "QueueName"]}
                          for d in r["Properties"].get("Dimensions", []))]
        self.assertEqual(len(alarms), 1, alarms)
        del t["Resources"][alarms[0]]
        statements = t["Resources"]["HandoffPipeRole"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
        statements[:] = [st for st in statements if st.get("Sid") != "DeadLetters"]
        found = self.findings(t)
        self.assertIn("[defaults] HandoffPipe: no alarm watches the dead-letter destination HandoffDeadLetterQueue",
                      found)
        self.assertIn("[defaults] HandoffPipe: the pipe's role HandoffPipeRole may not send to its dead-letter "
                      "destination HandoffDeadLetterQueue", found)


class Wiring(unittest.TestCase):
    """The local stack's wiring against the template's: the variables, the queues a function holds a sender for,
    the role token - on the local wiring `swarm-local wiring --json` printed (SWARM_WIRING_JSON), else on the
    template's own wiring in the same shape."""

    @classmethod
    def setUpClass(cls):
        cls.expanded = expand(TEMPLATE)
        cls.timings = Timings()
        path = os.environ.get("SWARM_WIRING_JSON")
        if path:
            with open(path) as f:
                cls.local = json.load(f)
        else:
            wired = wiring(Checker(cls.expanded, {}, "wiring", cls.timings))
            servers = ["ToolGateway", "ShopTools", "StreamingApi"]
            roles = gateway_roles(Checker(cls.expanded, {}, "wiring", cls.timings))
            cls.local = {"functions": {k: v for k, v in wired.items() if k not in servers}, "servers": servers,
                         "gateway_roles": {name: {"tools": role["tools"]} for name, role in roles.items()}}

    def findings(self, local, template=None):
        checker = Checker(template or self.expanded, {}, "wiring", self.timings)
        check_wiring(checker, local)
        return checker.findings

    def test_the_local_wiring_is_the_templates(self):
        self.assertEqual(self.findings(self.local), [])
        self.assertEqual(set(self.local["functions"]),
                         {"Orchestrator", "Worker", "RefundWorker", "DlqConsumer", "Sweeper", "Aggregator"})

    def test_a_wiring_that_gives_the_support_worker_the_refund_queue_fails(self):
        local = copy.deepcopy(self.local)
        worker = local["functions"]["Worker"]
        worker["sends"] = sorted(worker["sends"] + ["RefundQueue"])
        worker["env"] = sorted(worker["env"] + ["REFUND_QUEUE_URL"])
        found = self.findings(local)
        self.assertIn("[wiring] wiring Worker: the local stack gives it a sender for RefundQueue, which its role "
                      "may not send to", found)
        self.assertIn("[wiring] wiring Worker: the local stack gives it REFUND_QUEUE_URL; the template does not",
                      found)
        self.assertEqual(len(found), 2, found)

    def test_a_missing_sender_another_roles_token_or_an_unwired_function_fails(self):
        local = copy.deepcopy(self.local)
        local["functions"]["RefundWorker"]["sends"].remove("RefundQueue")
        local["functions"]["Worker"]["token"] = dict(local["functions"]["Worker"]["token"], role="refund")
        del local["functions"]["Sweeper"]
        found = self.findings(local)
        self.assertIn("[wiring] wiring RefundWorker: its role may send to RefundQueue; the local stack gives it no "
                      "sender for it", found)
        self.assertTrue(any(f.startswith("[wiring] wiring Worker: holds the gateway token") for f in found), found)
        self.assertIn("[wiring] wiring Sweeper: a function of the template the local stack does not build", found)

    def test_a_gateway_role_listing_other_tools_locally_fails(self):
        local = copy.deepcopy(self.local)
        local["gateway_roles"]["support"]["tools"] = ["shop__*"]
        found = self.findings(local)
        self.assertEqual(len(found), 1, found)
        self.assertTrue(found[0].startswith("[wiring] wiring gateway role support: lists ['shop__*'] locally"), found)
        del local["gateway_roles"]
        self.assertIn("[wiring] wiring gateway: the local wiring does not say its gateway roles' tool lists",
                      self.findings(local))

    def test_a_queue_url_given_without_the_permission_to_send_is_found_in_the_template(self):
        t = copy.deepcopy(self.expanded)
        t["Resources"]["Worker"]["Properties"]["Environment"]["Variables"]["REFUND_QUEUE_URL"] = {"Ref": "RefundQueue"}
        t["Resources"]["Sweeper"]["Properties"]["Environment"]["Variables"]["TASKS_QUEUE_URL"] = {"Ref": "TasksQueue"}
        found = Checker(t, {}, "defaults", self.timings).run()
        self.assertIn("[defaults] Worker: is given the URL of RefundQueue, which its role may not send to", found)
        self.assertIn("[defaults] Sweeper: is given the URL of TasksQueue, which its role may not send to", found)


if __name__ == "__main__":
    unittest.main()
