#!/usr/bin/env python3
# Checks the key settings of template.yaml as the SAM translator expands it, for the parameter defaults and for each samconfig.toml environment; exits 1 on any finding.
# Usage: .venv/bin/python infra/aws/check_template.py [template.yaml] [samconfig.toml] [--wiring wiring.json]
#
# What it guards (each one a failure seen in systems like this):
#   - SQS visibility timeout >= 6x the consuming function's timeout (no redelivery mid-batch)
#   - ScalingConfig.MaximumConcurrency present and >= 2 on every SQS event source (a cap that applies)
#   - ReportBatchItemFailures on every SQS and stream event source (partial batch responses honoured)
#   - the aggregator's FilterCriteria: only the conversation item reaching remaining = 0 while RUNNING
#   - no "*" in any IAM action or resource (X-Ray's PutTraceSegments / PutTelemetryRecords, which accept only "*",
#     are the one named exception, alone in their statement), no managed policies (they carry "*")
#   - active tracing (Tracing: Active) on every function, and that X-Ray statement in every function's role
#   - every alarm's description says where to look first ("Look first")
#   - least privilege (check_roles.py, ROLE_NEEDS): no role can send to a queue, read a secret, invoke a function or write a table
#     key prefix it does not need - above all the refund queue, the refund token and another function's secrets;
#     every table write is scoped by dynamodb:LeadingKeys
#   - nothing public around the gateway: the demo shop's function URL is AWS_IAM with no public permission, and
#     the gateway's role may invoke it (both actions)
#   - the template's Rules hold for every samconfig environment (prod: authentication on, no demo shop, no public
#     gateway URL)
#   - public function URLs (check_api.check_public_urls): only the gateway's and the streaming API's may be NONE, each
#     with both permissions Lambda asks for (lambda:InvokeFunctionUrl for NONE, lambda:InvokeFunction only via the
#     URL), never a bare public InvokeFunction; the streaming URL is NONE only while the function checks callers
#     itself (AuthMode=jwt, with the HTTP API authorizer's issuer and audience; AuthMode=none in dev only)
#   - the streaming API (check_api.check_streaming): RESPONSE_STREAM, a timeout of at least the deadline + 80 s and at
#     most 900 s, and the orchestrator's variables (less the approvals', plus the JWT authorizer's)
#   - provided.al2023 / arm64 / JSON logs on every function; secrets only by ARN in the environment
#   - table stream NEW_IMAGE and TTL on `ttl`; redrive policy on the task queues; the outputs
#   - the timing table (shared/core/timings.toml, read by timing_table.py): every value the template holds equals the table's for the
#     parameter defaults, and every rule between timings and capacities holds for each environment
#   - no conversation hangs: the aggregator's stream mapping has an on-failure destination (an SQS queue) that
#     an alarm watches; the table has the sweep's sparse index, a function is scheduled to sweep it, and its
#     role names the index; the gateway is told its instance cap (its reserved concurrency)
#   - every gateway role's tool list is an allowlist (no wildcard, no deny list); every pipe reading a stream has an
#     SQS dead-letter destination an alarm watches and its role may send to (check_allowlists.py)
#   - each function is given the URL of exactly the queues its role may send to (TASKS_QUEUE_URL, REFUND_QUEUE_URL)
#   - with --wiring FILE (`swarm-local wiring --json`; check_roles.check_wiring): the local stack wires every function as the template does -
#     the same variable names, a sender for exactly the queues its role may send to, the same role token, the same
#     tool list for each gateway role
#   - the API's contract: GET /health and GET /openapi.json need no credential, GET /conversations is authorised
#     as POST /conversations is; the customers' index exists and the orchestrator's role names it; the API's CORS
#     origins are the CorsAllowOrigins parameter, the same list the orchestrator gets (CORS_ALLOWED_ORIGINS)
#   - Bedrock natively (LlmAuth=sigv4): every role that reads the LLM key otherwise may invoke the configured
#     model instead (bedrock:InvokeModel on it), and none reads the LLM key
# Usage with the local wiring: ... check_template.py template.yaml samconfig.toml --wiring wiring.json
import json
import os
import re
import sys
import tomllib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from translate import expand  # noqa: E402
from check_allowlists import check_gateway_roles, check_pipes  # noqa: E402
from check_roles import ROLE_NEEDS, SECRET_PARAMS, check_least_privilege, check_queue_urls, check_wiring, grants  # noqa: E402
from timing_table import RuleError, Timings, evaluate  # noqa: E402
from check_api import PUBLIC_URL_FUNCTIONS, check_api, check_public_urls, check_streaming, check_sweep  # noqa: E402

EXPECTED_FILTER = {
    "dynamodb": {
        "Keys": {"SK": {"S": ["META"]}},
        "NewImage": {"remaining": {"N": ["0"]}, "status": {"S": ["RUNNING"]}},
    }
}
REQUIRED_OUTPUTS = {"ApiUrl", "TableName", "TasksQueueUrl", "GatewayUrl"}
RATE = re.compile(r"^rate\((\d+) (minute|minutes|hour|hours|day|days)\)$")
RATE_UNIT_SECS = {"minute": 60, "hour": 3600, "day": 86400}

# The only actions allowed on Resource "*": X-Ray accepts no other resource for them.
XRAY_STAR_ACTIONS = {"xray:puttracesegments", "xray:puttelemetryrecords"}
# A variable named like a secret holds an ARN, never the secret itself.
SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD)", re.IGNORECASE)


class Checker:
    def __init__(self, template, params, label, timings=None):
        self.t = template
        self.timings = timings
        self.resources = template["Resources"]
        self.label = label
        self.params = {k: v.get("Default") for k, v in template.get("Parameters", {}).items()}
        self.params.update(params)
        self.findings = []

    def fail(self, where, what):
        self.findings.append(f"[{self.label}] {where}: {what}")

    def value(self, v):
        """Resolves a Ref to a parameter (its value for this environment); other values as they are."""
        if isinstance(v, dict) and set(v) == {"Ref"} and v["Ref"] in self.params:
            return self.params[v["Ref"]]
        return v

    def number(self, v):
        """A number, a Ref to a parameter holding one, or an EventBridge rate expression (in seconds)."""
        v = self.value(v)
        if isinstance(v, str) and (m := RATE.match(v.strip())):
            return float(int(m.group(1)) * RATE_UNIT_SECS[m.group(2).rstrip("s")])
        try:
            return float(v)
        except (TypeError, ValueError):
            return None

    def target(self, ref):
        """The logical id a Ref / GetAtt points to."""
        if isinstance(ref, dict):
            if "Ref" in ref:
                return ref["Ref"]
            if "Fn::GetAtt" in ref:
                att = ref["Fn::GetAtt"]
                return att[0] if isinstance(att, list) else att.split(".")[0]
        return None

    def run(self):
        functions = {k: r for k, r in self.resources.items() if r["Type"] == "AWS::Lambda::Function"}
        if not functions:
            self.fail("template", "no Lambda functions")
        for name, fn in functions.items():
            p = fn["Properties"]
            if p.get("Runtime") != "provided.al2023":
                self.fail(name, f"runtime {p.get('Runtime')!r}, want provided.al2023")
            if p.get("Architectures") != ["arm64"]:
                self.fail(name, f"architectures {p.get('Architectures')!r}, want ['arm64']")
            if (p.get("LoggingConfig") or {}).get("LogFormat") != "JSON":
                self.fail(name, "LoggingConfig.LogFormat is not JSON")
            for var, val in ((p.get("Environment") or {}).get("Variables") or {}).items():
                if SECRET_NAME.search(var) and not var.endswith("_ARN"):
                    self.fail(name, f"environment variable {var} looks like a secret; pass its secret's ARN instead")
            if "ReservedConcurrentExecutions" not in p:
                self.fail(name, "ReservedConcurrentExecutions is not wired to a parameter")
            if (p.get("TracingConfig") or {}).get("Mode") != "Active":
                self.fail(name, "TracingConfig.Mode is not Active (Tracing: Active)")
            role = self.target(p.get("Role"))
            if role in self.resources and not self.grants_xray(self.resources[role]):
                self.fail(name, f"role {role} lacks xray:PutTraceSegments and xray:PutTelemetryRecords (active tracing writes segments)")

        esms = {k: r for k, r in self.resources.items() if r["Type"] == "AWS::Lambda::EventSourceMapping"}
        sqs_seen = stream_seen = 0
        for name, esm in esms.items():
            p = esm["Properties"]
            source = self.target(p.get("EventSourceArn"))
            fn_name = self.target(p.get("FunctionName"))
            fn = functions.get(fn_name, {}).get("Properties", {})
            if "ReportBatchItemFailures" not in (p.get("FunctionResponseTypes") or []):
                self.fail(name, "FunctionResponseTypes lacks ReportBatchItemFailures")
            src = self.resources.get(source, {})
            if src.get("Type") == "AWS::SQS::Queue":
                sqs_seen += 1
                mc = self.number((p.get("ScalingConfig") or {}).get("MaximumConcurrency"))
                if mc is None:
                    self.fail(name, "ScalingConfig.MaximumConcurrency missing")
                elif mc < 2:
                    self.fail(name, f"ScalingConfig.MaximumConcurrency {mc:g} < 2 (SQS minimum)")
                vis = self.number(src["Properties"].get("VisibilityTimeout", 30))
                timeout = self.number(fn.get("Timeout", 3))
                if vis is None or timeout is None:
                    self.fail(name, "visibility timeout or function timeout not a number")
                elif vis < 6 * timeout:
                    self.fail(name, f"queue {source} visibility {vis:g} s < 6 x {fn_name} timeout {timeout:g} s")
            elif src.get("Type") == "AWS::DynamoDB::Table":
                stream_seen += 1
                filters = (p.get("FilterCriteria") or {}).get("Filters") or []
                patterns = [json.loads(f["Pattern"]) for f in filters if isinstance(f.get("Pattern"), str)]
                if patterns != [EXPECTED_FILTER]:
                    self.fail(name, f"FilterCriteria {patterns!r}, want exactly {EXPECTED_FILTER!r}")
                self.check_on_failure(name, p, fn_name)
        # Reserved concurrency below the event sources' caps throttles them: messages then
        # burn receives and reach the DLQ without running.
        caps = {}
        for esm in esms.values():
            p = esm["Properties"]
            mc = self.number((p.get("ScalingConfig") or {}).get("MaximumConcurrency"))
            if mc is not None:
                fn_name = self.target(p.get("FunctionName"))
                caps[fn_name] = caps.get(fn_name, 0) + mc
        for fn_name, cap in caps.items():
            reserved = self.reserved(functions.get(fn_name, {}).get("Properties", {}))
            if reserved is not None and reserved < cap:
                self.fail(fn_name, f"reserved concurrency {reserved:g} < MaximumConcurrency {cap:g} of its SQS event sources")
        if sqs_seen < 4:
            self.fail("event sources", f"{sqs_seen} SQS event sources, want tasks, refund and 2 DLQs")
        if stream_seen != 1:
            self.fail("event sources", f"{stream_seen} DynamoDB stream event sources, want 1 (aggregator)")

        for name, r in self.resources.items():
            if r["Type"] == "AWS::CloudWatch::Alarm":
                if "Look first" not in str(r["Properties"].get("AlarmDescription", "")):
                    self.fail(name, "AlarmDescription does not say where to look first (\"Look first ...\")")
            if r["Type"] == "AWS::IAM::Role":
                if r["Properties"].get("ManagedPolicyArns"):
                    self.fail(name, "managed policies attached (they grant '*'); use inline statements")
                for policy in r["Properties"].get("Policies", []):
                    self.statements(f"{name}/{policy.get('PolicyName')}", policy["PolicyDocument"])
            elif r["Type"] in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
                self.statements(name, r["Properties"]["PolicyDocument"])
            elif r["Type"] == "AWS::SQS::Queue" and name in ("TasksQueue", "RefundQueue"):
                redrive = r["Properties"].get("RedrivePolicy") or {}
                if not redrive.get("deadLetterTargetArn") or self.number(redrive.get("maxReceiveCount")) is None:
                    self.fail(name, "no redrive policy to a DLQ")
            elif r["Type"] == "AWS::DynamoDB::Table" and name == "Table":
                p = r["Properties"]
                if (p.get("StreamSpecification") or {}).get("StreamViewType") != "NEW_IMAGE":
                    self.fail(name, "stream view type is not NEW_IMAGE")
                ttl = p.get("TimeToLiveSpecification") or {}
                if ttl.get("AttributeName") != "ttl" or ttl.get("Enabled") is not True:
                    self.fail(name, "TTL not enabled on attribute `ttl`")

        check_sweep(self, functions)
        self.check_instance_cap(functions)
        check_api(self, functions)
        check_streaming(self, functions)
        check_public_urls(self)
        self.check_bedrock()
        missing = REQUIRED_OUTPUTS - set(self.t.get("Outputs", {}))
        if missing:
            self.fail("Outputs", f"missing {sorted(missing)}")
        self.check_rules()
        check_queue_urls(self, functions)
        check_least_privilege(self)
        self.check_nothing_public()
        check_gateway_roles(self)
        check_pipes(self)
        if self.timings is not None:
            self.check_timings()
        return self.findings

    def check_on_failure(self, name, props, fn_name):
        """A stream batch given up must leave a trace: an SQS on-failure destination, an alarm on it, and the
        function's role allowed to send there."""
        queue = self.target(((props.get("DestinationConfig") or {}).get("OnFailure") or {}).get("Destination"))
        if self.resources.get(queue, {}).get("Type") != "AWS::SQS::Queue":
            self.fail(name, "no SQS on-failure destination (DestinationConfig.OnFailure): a dropped batch would vanish")
            return
        watched = any(
            r["Type"] == "AWS::CloudWatch::Alarm"
            and any(self.target(d.get("Value")) == queue for d in r["Properties"].get("Dimensions", []))
            for r in self.resources.values()
        )
        if not watched:
            self.fail(name, f"no alarm watches the on-failure destination {queue}")
        role = self.target(self.resources.get(fn_name, {}).get("Properties", {}).get("Role"))
        if not self.allows(role, "sqs:SendMessage", lambda res: self.target(res) == queue):
            self.fail(name, f"{fn_name}'s role may not send to its on-failure destination {queue}")

    def check_bedrock(self):
        """With LlmAuth=sigv4, the roles that would read the LLM key invoke the configured model instead."""
        if "LlmSigV4" not in (self.t.get("Conditions") or {}):
            self.fail("template", "no LlmSigV4 condition (LlmAuth=sigv4: Bedrock with the functions' roles)")
            return
        if not self.condition("LlmSigV4"):
            return
        for name, needs in ROLE_NEEDS.items():
            if "LlmApiKeySecret" not in needs.get("secrets", set()) or name not in self.resources:
                continue
            if not self.allows_now(name, "bedrock:InvokeModel", lambda res: isinstance(res, dict)
                                   and str(res.get("Fn::Sub", "")).endswith("${LlmModel}")):
                self.fail(name, "with LlmAuth=sigv4 it cannot invoke the configured model (bedrock:InvokeModel on ${LlmModel})")
            if "LlmApiKeySecret" in grants(self, self.resources[name])["secrets"]:
                self.fail(name, "with LlmAuth=sigv4 it still reads the LLM key")

    def allows_now(self, role, action, resource_ok):
        """Whether `role`'s inline policies, resolved for this environment, allow `action` on a resource `resource_ok` accepts."""
        for policy in self.resources.get(role, {}).get("Properties", {}).get("Policies", []):
            statements = self.chosen(policy["PolicyDocument"]).get("Statement", [])
            for st in statements if isinstance(statements, list) else [statements]:
                if st.get("Effect") == "Allow" and action in self.flatten(st.get("Action")) \
                        and any(resource_ok(res) for res in self.flatten(st.get("Resource"))):
                    return True
        return False

    def check_instance_cap(self, functions):
        """A gateway divides its global limits by its instance cap: it must be told its reserved concurrency."""
        gateways = [f for f, r in functions.items()
                    if "GATEWAY_CONFIG" in ((r["Properties"].get("Environment") or {}).get("Variables") or {})]
        for f in gateways:
            props = functions[f]["Properties"]
            cap = props["Environment"]["Variables"].get("GATEWAY_INSTANCE_CAP")
            reserved = props.get("ReservedConcurrentExecutions")
            param = None
            if isinstance(reserved, dict) and "Fn::If" in reserved:
                param = self.target(reserved["Fn::If"][1])
            if cap is None or self.target(cap) != param:
                self.fail(f, f"GATEWAY_INSTANCE_CAP must be its reserved concurrency (Ref {param}), so limits do not grow with instances")

    def allows(self, role, action, resource_ok):
        """Whether `role`'s inline policies allow `action` on a resource `resource_ok` accepts."""
        r = self.resources.get(role, {})
        for policy in r.get("Properties", {}).get("Policies", []):
            statements = policy["PolicyDocument"].get("Statement", [])
            for st in statements if isinstance(statements, list) else [statements]:
                if not isinstance(st, dict) or st.get("Effect") != "Allow":
                    continue
                actions = list(self.flatten(st.get("Action")))
                if action in actions and any(resource_ok(res) for res in self.flatten(st.get("Resource"))):
                    return True
        return False

    def lookup(self, where):
        """The value `where` (a [template] entry of the timing table) has in this environment; None if absent."""
        if where.startswith("param:"):
            name = where[len("param:"):]
            if name not in self.params:
                self.fail("timings", f"{where}: no such template parameter")
                return None
            return self.number(self.params[name])
        node = self.t
        for part in where.split("."):
            if not isinstance(node, dict) or part not in node:
                return None
            node = node[part]
        return self.number(node)

    def check_timings(self):
        """Template values equal the table's (for the defaults); every rule holds for this environment."""
        values = dict(self.timings.values)
        for key, where in self.timings.template.items():
            got = self.lookup(where)
            if got is None:
                if not where.startswith("Resources.ShopTools"):
                    self.fail("timings", f"{key}: {where} not found in the template")
                continue
            if self.label == "defaults" and got != self.timings.values[key]:
                self.fail("timings", f"{key}: the template holds {got:g} at {where}, the timing table {self.timings.values[key]:g}")
            values[key] = got
        for rule in self.timings.rules:
            try:
                ok = evaluate(rule["check"], values)
            except (RuleError, SyntaxError, ZeroDivisionError) as e:
                self.fail("timings", f"rule {rule['check']!r} cannot be evaluated: {e}")
                continue
            if not ok:
                used = sorted(k for k in values if re.search(rf"(?<![\w.]){re.escape(k)}(?![\w.])", rule["check"]))
                shown = ", ".join(f"{k}={values[k]:g}" for k in used)
                self.fail("timings", f"rule broken: {rule['check']} ({shown}) - {rule.get('why', '')}")

    # ---------------------------------------------------------------- conditions, rules, least privilege

    def condition(self, name):
        """Whether template condition `name` holds for this environment's parameters."""
        return bool(self.truth(self.t.get("Conditions", {})[name]))

    def truth(self, node):
        """Evaluates Fn::Equals / Not / And / Or / Condition / Ref over this environment's parameters."""
        if isinstance(node, dict) and len(node) == 1:
            (fn, arg), = node.items()
            if fn == "Fn::Equals":
                a, b = (self.truth(x) for x in arg)
                return str(a) == str(b)
            if fn == "Fn::Not":
                return not self.truth(arg[0])
            if fn == "Fn::And":
                return all(self.truth(x) for x in arg)
            if fn == "Fn::Or":
                return any(self.truth(x) for x in arg)
            if fn == "Condition":
                return self.condition(arg)
            if fn == "Ref":
                return self.params.get(arg, "")
        return node

    def check_rules(self):
        """Every Rule of the template holds for this environment (CloudFormation refuses the deploy otherwise)."""
        for name, rule in (self.t.get("Rules") or {}).items():
            if "RuleCondition" in rule and not self.truth(rule["RuleCondition"]):
                continue
            for assertion in rule.get("Assertions", []):
                if not self.truth(assertion["Assert"]):
                    self.fail(f"rule {name}", assertion.get("AssertDescription", "assertion fails"))

    def chosen(self, node):
        """`node` with every Fn::If resolved for this environment (AWS::NoValue branches become None)."""
        if isinstance(node, dict):
            if "Fn::If" in node:
                cond, yes, no = node["Fn::If"]
                return self.chosen(yes if self.condition(cond) else no)
            if node == {"Ref": "AWS::NoValue"}:
                return None
            return {k: self.chosen(v) for k, v in node.items()}
        if isinstance(node, list):
            return [x for x in (self.chosen(v) for v in node) if x is not None]
        return node

    def names(self, resource):
        """The logical ids (or SECRET_PARAMS names) a resolved Resource entry points to; strings as they are."""
        out = []
        for item in resource if isinstance(resource, list) else [resource]:
            target = self.target(item)
            if target in SECRET_PARAMS:
                out.append(SECRET_PARAMS[target])
            elif target is not None:
                out.append(target)
            elif isinstance(item, dict) and "Fn::Sub" in item:
                text = item["Fn::Sub"] if isinstance(item["Fn::Sub"], str) else item["Fn::Sub"][0]
                out += [m.split(".")[0] for m in re.findall(r"\$\{([^}!]+)\}", text) if not m.startswith("AWS::")]
            else:
                out.append(item)
        return out

    def check_nothing_public(self):
        """The demo shop is reachable only through the gateway: AWS_IAM URL, no public permission, the gateway may invoke it."""
        for name, r in self.resources.items():
            if "Condition" in r and not self.condition(r["Condition"]):
                continue
            p = self.chosen(r.get("Properties", {}))
            if r["Type"] == "AWS::Lambda::Url" and self.target(p.get("TargetFunctionArn")) == "ShopTools":
                if self.value(p.get("AuthType")) != "AWS_IAM":
                    self.fail(name, f"the demo shop's function URL has AuthType {self.value(p.get('AuthType'))!r}, want AWS_IAM")
            if r["Type"] == "AWS::Lambda::Permission" and p.get("Principal") == "*":
                if self.target(p.get("FunctionName")) not in PUBLIC_URL_FUNCTIONS:
                    self.fail(name, f"grants {self.target(p.get('FunctionName'))} to everyone (Principal '*')")
        if "ShopTools" in self.resources and self.condition(self.resources["ShopTools"].get("Condition", "DeployShop")):
            gateway = self.resources.get("ToolGatewayRole")
            actions = set()
            if gateway:
                for policy in gateway["Properties"].get("Policies", []):
                    statements = self.chosen(policy["PolicyDocument"]).get("Statement", [])
                    for st in statements if isinstance(statements, list) else [statements]:
                        if "ShopTools" in self.names(st.get("Resource")):
                            actions |= {a.lower() for a in self.flatten(st.get("Action")) if isinstance(a, str)}
            for action in ("lambda:invokefunctionurl", "lambda:invokefunction"):
                if action not in actions:
                    self.fail("ToolGatewayRole", f"cannot {action} on ShopTools: the gateway could not reach the demo shop")

    def reserved(self, props):
        """Reserved concurrency in force for this environment, None when unreserved."""
        v = props.get("ReservedConcurrentExecutions")
        if isinstance(v, dict) and "Fn::If" in v:
            cond, yes, _no = v["Fn::If"]
            param = self.t["Conditions"][cond]["Fn::Not"][0]["Fn::Equals"][0]["Ref"]
            return None if self.number(self.params[param]) == -1 else self.number(yes)
        return self.number(v)

    def grants_xray(self, role):
        """Whether an inline policy of `role` allows both X-Ray write actions."""
        for policy in role.get("Properties", {}).get("Policies", []):
            statements = policy.get("PolicyDocument", {}).get("Statement", [])
            for st in statements if isinstance(statements, list) else [statements]:
                if not isinstance(st, dict) or st.get("Effect") != "Allow":
                    continue
                if XRAY_STAR_ACTIONS <= {a.lower() for a in self.flatten(st.get("Action")) if isinstance(a, str)}:
                    return True
        return False

    def statements(self, where, doc):
        statements = doc.get("Statement", [])
        for st in statements if isinstance(statements, list) else [statements]:
            if isinstance(st, dict) and "Fn::If" in st:
                # Conditional statement: check both branches.
                for branch in st["Fn::If"][1:]:
                    if isinstance(branch, dict) and "Ref" not in branch:
                        self.statements(where, {"Statement": [branch]})
                continue
            actions = {a.lower() for a in self.flatten(st.get("Action")) if isinstance(a, str)}
            # The one exception: X-Ray's write actions, alone, allowed on "*" (they take no other resource).
            xray_only = (
                st.get("Effect") == "Allow"
                and actions
                and actions <= XRAY_STAR_ACTIONS
                and not any(k in st for k in ("NotAction", "NotResource", "Condition"))
            )
            for key in ("Action", "Resource", "NotAction", "NotResource"):
                for item in self.flatten(st.get(key)):
                    if key == "Resource" and item == "*" and xray_only:
                        continue
                    if isinstance(item, str) and "*" in item:
                        self.fail(where, f"{key} {item!r} contains '*'")

    def flatten(self, v):
        if isinstance(v, list):
            for x in v:
                yield from self.flatten(x)
        elif isinstance(v, dict) and "Fn::If" in v:
            for x in v["Fn::If"][1:]:
                yield from self.flatten(x)
        elif v is not None:
            yield v


def overrides(samconfig_path):
    """Parameter overrides per samconfig.toml environment: {env: {name: value}}."""
    if not os.path.exists(samconfig_path):
        return {}
    with open(samconfig_path, "rb") as f:
        config = tomllib.load(f)
    out = {}
    for env, sections in config.items():
        if not isinstance(sections, dict):
            continue
        raw = (sections.get("deploy") or {}).get("parameters", {}).get("parameter_overrides")
        if raw is None:
            continue
        items = raw if isinstance(raw, list) else raw.split()
        out[env] = dict(item.split("=", 1) for item in items)
    return out


def main():
    args = sys.argv[1:]
    wiring_path = None
    if "--wiring" in args:
        at = args.index("--wiring")
        if at + 1 >= len(args):
            raise SystemExit("--wiring needs a file (swarm-local wiring --json > wiring.json)")
        wiring_path = args[at + 1]
        del args[at:at + 2]
    template_path = args[0] if args else "template.yaml"
    samconfig_path = args[1] if len(args) > 1 else os.path.join(os.path.dirname(os.path.abspath(template_path)), "samconfig.toml")
    template = expand(template_path)
    timings = Timings()
    table_findings = []
    for rule in timings.rules:
        try:
            if not evaluate(rule["check"], timings.values):
                table_findings.append(f"[table] rule broken by the timing table itself: {rule['check']} - {rule.get('why', '')}")
        except (RuleError, SyntaxError, ZeroDivisionError) as e:
            table_findings.append(f"[table] rule {rule['check']!r} cannot be evaluated: {e}")
    findings = table_findings + Checker(template, {}, "defaults", timings).run()
    # Bedrock natively: the roles as they are with LlmAuth=sigv4.
    findings += Checker(template, {"LlmAuth": "sigv4"}, "sigv4", timings).run()
    if wiring_path is not None:
        with open(wiring_path) as f:
            local = json.load(f)
        checker = Checker(template, {}, "wiring", timings)
        check_wiring(checker, local)
        findings += checker.findings
        print(f"check_template: compared the local wiring of {len(local.get('functions', {}))} functions "
              f"({wiring_path}) with the template")
    envs = overrides(samconfig_path)
    for env, params in envs.items():
        unknown = set(params) - set(template.get("Parameters", {}))
        if unknown:
            findings.append(f"[{env}] samconfig.toml overrides unknown parameters {sorted(unknown)}")
        findings += Checker(template, params, env, timings).run()
    for f in findings:
        print(f"FINDING {f}")
    checked = ["defaults", *envs]
    print(f"check_template: {len(findings)} finding(s) in {template_path} for {', '.join(checked)}; "
          f"{len(timings.values)} timings, {len(timings.template)} template bindings, {len(timings.rules)} rules")
    sys.exit(1 if findings else 0)


if __name__ == "__main__":
    main()
