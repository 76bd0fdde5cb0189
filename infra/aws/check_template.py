#!/usr/bin/env python3
# Checks the key settings of template.yaml as the SAM translator expands it, for the parameter defaults and for each samconfig.toml environment; exits 1 on any finding.
# Usage: .venv/bin/python infra/aws/check_template.py [template.yaml] [samconfig.toml]
#
# What it guards (each one a failure seen in systems like this):
#   - SQS visibility timeout >= 6x the consuming function's timeout (no redelivery mid-batch)
#   - ScalingConfig.MaximumConcurrency present and >= 2 on every SQS event source (a cap that applies)
#   - ReportBatchItemFailures on every SQS and stream event source (partial batch responses honoured)
#   - the aggregator's FilterCriteria: only the conversation item reaching remaining = 0 while RUNNING
#   - no "*" in any IAM action or resource, no managed policies (they carry "*")
#   - provided.al2023 / arm64 / JSON logs on every function; secrets only by ARN in the environment
#   - table stream NEW_IMAGE and TTL on `ttl`; redrive policy on the task queues; the outputs
#   - the timing table (shared/core/timings.toml): every value the template holds equals the table's for the
#     parameter defaults, and every rule between timings and capacities holds for each environment
import ast
import json
import os
import re
import sys
import tomllib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from translate import expand  # noqa: E402

EXPECTED_FILTER = {
    "dynamodb": {
        "Keys": {"SK": {"S": ["META"]}},
        "NewImage": {"remaining": {"N": ["0"]}, "status": {"S": ["RUNNING"]}},
    }
}
REQUIRED_OUTPUTS = {"ApiUrl", "TableName", "TasksQueueUrl", "GatewayUrl"}
SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD)", re.IGNORECASE)


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TIMINGS_PATH = os.path.join(ROOT, "shared", "core", "timings.toml")


class Timings:
    """The timing table: flat values by dotted key, where each stands in the template, and the rules between them."""

    def __init__(self, path=TIMINGS_PATH):
        with open(path, "rb") as f:
            data = tomllib.load(f)
        self.path = path
        self.template = data.pop("template", {})
        self.rules = data.pop("rule", [])
        self.values = {}
        self._flatten(data, "")
        for key in self.template:
            if key not in self.values:
                raise SystemExit(f"{path}: [template] names {key!r}, which the table does not hold")

    def _flatten(self, node, prefix):
        for k, v in node.items():
            name = f"{prefix}{k}"
            if isinstance(v, dict):
                self._flatten(v, name + ".")
            elif isinstance(v, (int, float)) and not isinstance(v, bool):
                self.values[name] = v
            else:
                raise SystemExit(f"{self.path}: {name} is {v!r}; the table holds numbers only")


class RuleError(Exception):
    pass


def evaluate(expression, values):
    """Evaluates one rule over dotted names: numbers, + - * /, min(), max(), comparisons, and/or/not."""

    def name_of(node):
        if isinstance(node, ast.Name):
            return node.id
        if isinstance(node, ast.Attribute):
            return f"{name_of(node.value)}.{node.attr}"
        raise RuleError(f"unsupported expression {ast.dump(node)}")

    def ev(node):
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, (ast.Name, ast.Attribute)):
            key = name_of(node)
            if key not in values:
                raise RuleError(f"unknown name {key!r}")
            return values[key]
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div)):
            a, b = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Add):
                return a + b
            if isinstance(node.op, ast.Sub):
                return a - b
            if isinstance(node.op, ast.Mult):
                return a * b
            return a / b
        if isinstance(node, ast.BoolOp):
            results = [ev(v) for v in node.values]
            return all(results) if isinstance(node.op, ast.And) else any(results)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return not ev(node.operand)
        if isinstance(node, ast.Compare):
            left = ev(node.left)
            for op, right_node in zip(node.ops, node.comparators):
                right = ev(right_node)
                ok = {ast.Lt: left < right, ast.LtE: left <= right, ast.Gt: left > right, ast.GtE: left >= right,
                      ast.Eq: left == right, ast.NotEq: left != right}.get(type(op))
                if ok is None:
                    raise RuleError(f"unsupported comparison {ast.dump(op)}")
                if not ok:
                    return False
                left = right
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("min", "max"):
            args = [ev(a) for a in node.args]
            return min(args) if node.func.id == "min" else max(args)
        raise RuleError(f"unsupported expression {ast.dump(node)}")

    return ev(ast.parse(expression, mode="eval"))


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
        v = self.value(v)
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

        missing = REQUIRED_OUTPUTS - set(self.t.get("Outputs", {}))
        if missing:
            self.fail("Outputs", f"missing {sorted(missing)}")
        if self.timings is not None:
            self.check_timings()
        return self.findings

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

    def reserved(self, props):
        """Reserved concurrency in force for this environment, None when unreserved."""
        v = props.get("ReservedConcurrentExecutions")
        if isinstance(v, dict) and "Fn::If" in v:
            cond, yes, _no = v["Fn::If"]
            param = self.t["Conditions"][cond]["Fn::Not"][0]["Fn::Equals"][0]["Ref"]
            return None if self.number(self.params[param]) == -1 else self.number(yes)
        return self.number(v)

    def statements(self, where, doc):
        statements = doc.get("Statement", [])
        for st in statements if isinstance(statements, list) else [statements]:
            if isinstance(st, dict) and "Fn::If" in st:
                # Conditional statement: check both branches.
                for branch in st["Fn::If"][1:]:
                    if isinstance(branch, dict) and "Ref" not in branch:
                        self.statements(where, {"Statement": [branch]})
                continue
            for key in ("Action", "Resource", "NotAction", "NotResource"):
                for item in self.flatten(st.get(key)):
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
    template_path = sys.argv[1] if len(sys.argv) > 1 else "template.yaml"
    samconfig_path = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(os.path.abspath(template_path)), "samconfig.toml")
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
