#!/usr/bin/env python3
# Checks of template.yaml that check_template.py runs: least privilege (each role against ROLE_NEEDS, the table of
# what each function needs), the queue URLs each function is given, and the local stack's wiring against the template's.
# Usage: imported by check_template.py (Checker.run, Checker.check_bedrock, main), iam_policies.py and the lint's
# tests; no command line of its own. Each function takes the Checker of one environment.
from check_allowlists import check_local_roles

# What each function's role needs, and nothing more (the least-privilege table; docs/security.md).
#   send     queues it may send to          consume  queues it receives from
#   secrets  secrets it may read            invoke   functions (or function URLs) it may call
#   writes   partition-key prefixes of the conversations table it may write (dynamodb:LeadingKeys); another
#            table as "<Table>:<prefix>" ("<Table>:<any item>" unscoped); reads of the tables are open to all
#   stream   reads the table's stream
# Why each: the orchestrator enqueues every subtask at planning time (refund ones on the refund queue, whatever
# their dependencies) and approved refunds, claims idempotency keys and rate slots, records operators' decisions
# (APPROVALS) and signs approval tokens; workers release dependents and hand work back on their own queue - support
# workers never send to the refund queue (refund subtasks wait for their dependencies on it), the DLQ consumer only
# a dead-lettered confirmation, back as its next replay;
# only the refund worker holds the refund token and records the approvals its refunds wait for; the DLQ consumer and
# the sweeper run no model and no tool (the sweeper runs the deadline path: conversation writes and the sweep
# index; and re-enqueues approved refunds not run past their token's window with a fresh token: the approval key,
# APPROVALS and the refund queue); the aggregator's stream mapping sends a dropped batch to its
# on-failure queue with the function's role; the gateway reads the role tokens (and an external shop's token) and
# the approval key (it verifies tokens) and invokes the demo shop; the shop writes its own ledger table only; the
# hand-off pipe reads the table's stream (and puts events on the default bus, a record it gives up on its DLQ).
ROLE_NEEDS = {
    "OrchestratorRole": dict(send={"TasksQueue", "RefundQueue"},
                             secrets={"LlmApiKeySecret", "PlannerTokenSecret", "ApprovalKeySecret"},
                             invoke={"ToolGateway"}, writes={"CONV#*", "IDEM#*", "LIMIT#*", "APPROVALS"}),
    # The streaming API starts and follows conversations as the orchestrator does and serves the console's reads
    # (a customer's list: the customer index); it decides no approval.
    "StreamingApiRole": dict(send={"TasksQueue", "RefundQueue"}, secrets={"LlmApiKeySecret", "PlannerTokenSecret"},
                             invoke={"ToolGateway"}, writes={"CONV#*", "IDEM#*", "LIMIT#*"}),
    "WorkerRole": dict(send={"TasksQueue"}, consume={"TasksQueue"}, secrets={"LlmApiKeySecret", "SupportTokenSecret"},
                       invoke={"ToolGateway"}, writes={"CONV#*"}),
    "RefundWorkerRole": dict(send={"TasksQueue", "RefundQueue"}, consume={"RefundQueue"},
                             secrets={"LlmApiKeySecret", "RefundTokenSecret"}, invoke={"ToolGateway"},
                             writes={"CONV#*", "APPROVALS"}),
    # The DLQ consumer hands a dead-lettered confirmation back to its role's queue (the side effects' queue) as the
    # next replay, bounded by the confirmation's attempts: its receives were used up by failed invocations, which
    # say nothing of the side effect. It holds no gateway token and no approval key, so it can run nothing there.
    "DlqConsumerRole": dict(send={"TasksQueue", "RefundQueue"},
                            consume={"TasksDeadLetterQueue", "RefundDeadLetterQueue"}, writes={"CONV#*"}),
    "SweeperRole": dict(send={"RefundQueue"}, secrets={"ApprovalKeySecret"}, writes={"CONV#*", "APPROVALS"}),
    # The role SAM makes for the sweeper's EventBridge Scheduler schedule: it invokes the sweeper, nothing else.
    "SweeperScheduleRole": dict(invoke={"Sweeper"}),
    "AggregatorRole": dict(send={"AggregatorFailuresQueue"}, secrets={"LlmApiKeySecret"}, writes={"CONV#*"},
                           stream=True),
    "ToolGatewayRole": dict(secrets={"SupportTokenSecret", "RefundTokenSecret", "PlannerTokenSecret",
                                     "ShopToolsTokenSecret", "ApprovalKeySecret"}, invoke={"ShopTools"}),
    "ShopToolsRole": dict(writes={"ShopLedgerTable:<any item>"}),
    "HandoffPipeRole": dict(send={"HandoffDeadLetterQueue"}, stream=True),
}
# Secrets a parameter can name instead of the stack creating them.
SECRET_PARAMS = {"LlmApiKeySecretArn": "LlmApiKeySecret", "ShopToolsTokenSecretArn": "ShopToolsTokenSecret"}
DYNAMODB_WRITES = {"dynamodb:putitem", "dynamodb:updateitem", "dynamodb:deleteitem", "dynamodb:batchwriteitem",
                   "dynamodb:conditioncheckitem"}
CONSUME_ACTIONS = {"sqs:receivemessage", "sqs:deletemessage", "sqs:changemessagevisibility"}
STREAM_ACTIONS = {"dynamodb:getrecords", "dynamodb:getsharditerator", "dynamodb:describestream"}

# The variables that name a queue a function sends to, and the queue.
QUEUE_URL_VARS = {"TASKS_QUEUE_URL": "TasksQueue", "REFUND_QUEUE_URL": "RefundQueue"}
# The secret holding each gateway role's bearer token.
TOKEN_SECRETS = {"SupportTokenSecret": "support", "RefundTokenSecret": "refund", "PlannerTokenSecret": "planner"}


def grants(checker, role):
    """What `role` can reach in this environment: {kind: set of names}, table writes as key prefixes."""
    reach = {"send": set(), "consume": set(), "secrets": set(), "invoke": set(), "writes": set(), "stream": False}
    for policy in role["Properties"].get("Policies", []):
        statements = checker.chosen(policy["PolicyDocument"]).get("Statement", [])
        for st in statements if isinstance(statements, list) else [statements]:
            if st.get("Effect") != "Allow":
                continue
            actions = {a.lower() for a in checker.flatten(st.get("Action")) if isinstance(a, str)}
            targets = checker.names(st.get("Resource"))
            for t in targets:
                kind = checker.resources.get(t, {}).get("Type")
                if "sqs:sendmessage" in actions and kind == "AWS::SQS::Queue":
                    reach["send"].add(t)
                if actions & CONSUME_ACTIONS and kind == "AWS::SQS::Queue":
                    reach["consume"].add(t)
                if "secretsmanager:getsecretvalue" in actions and (kind == "AWS::SecretsManager::Secret" or t in SECRET_PARAMS.values()):
                    reach["secrets"].add(t)
                if actions & {"lambda:invokefunction", "lambda:invokefunctionurl"} and kind == "AWS::Lambda::Function":
                    reach["invoke"].add(t)
            tables = [t for t in targets if checker.resources.get(t, {}).get("Type") == "AWS::DynamoDB::Table"]
            if actions & DYNAMODB_WRITES and tables:
                keys = ((st.get("Condition") or {}).get("ForAllValues:StringLike") or {}).get("dynamodb:LeadingKeys")
                for table in tables:
                    # The conversations table by key prefix alone; any other table by name.
                    scope = "" if table == "Table" else f"{table}:"
                    reach["writes"] |= {scope + k for k in keys} if keys else {scope + "<any item>"}
            if actions & STREAM_ACTIONS:
                reach["stream"] = True
    return reach


def check_least_privilege(checker):
    """No role reaches a queue, secret, function or key prefix beyond ROLE_NEEDS (in this environment)."""
    roles = {k: r for k, r in checker.resources.items() if r["Type"] == "AWS::IAM::Role"}
    for name, role in roles.items():
        if "Condition" in role and not checker.condition(role["Condition"]):
            continue
        if name not in ROLE_NEEDS:
            checker.fail(name, "not in ROLE_NEEDS: say what this role needs before granting it anything")
            continue
        needs, reach = ROLE_NEEDS[name], grants(checker, role)
        words = {"send": "send to", "consume": "receive from", "secrets": "read the secret", "invoke": "invoke",
                 "writes": "write table items keyed"}
        for kind in ("send", "consume", "secrets", "invoke", "writes"):
            for extra in sorted(reach[kind] - needs.get(kind, set())):
                checker.fail(name, f"can {words[kind]} {extra} without needing it")
        if reach["stream"] and not needs.get("stream"):
            checker.fail(name, "can read the table's stream without needing it")


def check_queue_urls(checker, functions):
    """A function is given the URL of exactly the queues its role may send to: a URL without the permission
    is a sender that can only fail (or, locally, one that works where AWS would refuse), and a permission
    without the URL is a grant nobody uses."""
    for name, wired in wiring(checker, functions).items():
        given = {QUEUE_URL_VARS[v] for v in wired["env"] if v in QUEUE_URL_VARS}
        for queue in sorted(given - set(wired["sends"])):
            checker.fail(name, f"is given the URL of {queue}, which its role may not send to")
        for queue in sorted(set(wired["sends"]) - given):
            checker.fail(name, f"its role may send to {queue}, whose URL it is not given")


def wiring(checker, functions=None):
    """Each function as the template wires it (this environment): its variable names, the queues its role may
    send to, and the gateway role token it holds (the role it acts as and the secret named by its
    GATEWAY_TOKEN_SECRET_ARN) - the shape `swarm-local wiring --json` prints for the local stack."""
    if functions is None:
        functions = {k: r for k, r in checker.resources.items() if r["Type"] == "AWS::Lambda::Function"}
    out = {}
    for name, fn in functions.items():
        if "Condition" in fn and not checker.condition(fn["Condition"]):
            continue
        p = fn["Properties"]
        variables = checker.chosen((p.get("Environment") or {}).get("Variables") or {})
        role = checker.target(p.get("Role"))
        sends = grants(checker, checker.resources[role])["send"] if role in checker.resources else set()
        # The stream mapping, not the function's code, sends a dropped batch's record to its on-failure
        # destination (with the function's role): no sender of the function's own.
        sends -= on_failure_destinations(checker, name)
        token = None
        if "GATEWAY_TOKEN_SECRET_ARN" in variables:
            secret = checker.target(variables["GATEWAY_TOKEN_SECRET_ARN"])
            token = {"role": variables.get("WORKER_ROLE"), "secret": secret, "secret_role": TOKEN_SECRETS.get(secret)}
        out[name] = {"env": sorted(variables), "sends": sorted(sends), "token": token}
    return out


def on_failure_destinations(checker, fn_name):
    """The queues `fn_name`'s event source mappings send a dropped batch's record to."""
    out = set()
    for esm in checker.resources.values():
        p = esm.get("Properties", {})
        if esm["Type"] == "AWS::Lambda::EventSourceMapping" and checker.target(p.get("FunctionName")) == fn_name:
            destination = ((p.get("DestinationConfig") or {}).get("OnFailure") or {}).get("Destination")
            if checker.target(destination):
                out.add(checker.target(destination))
    return out


def check_wiring(checker, local):
    """The local stack's wiring (`swarm-local wiring --json`) against the template's: every function of the
    template is either wired locally or a server the stack configures itself, and each wired one has the same
    variable names, a sender for exactly the queues its role may send to, and the same role token."""
    template = wiring(checker)
    servers = set(local.get("servers", []))
    wired = local.get("functions", {})
    for name in sorted(set(template) - set(wired) - servers):
        checker.fail(f"wiring {name}", "a function of the template the local stack does not build")
    for name in sorted(set(wired) - set(template)):
        checker.fail(f"wiring {name}", "the local stack builds a function the template does not have")
    for name in sorted(set(template) & set(wired)):
        want, got = template[name], wired[name]
        for var in sorted(set(want["env"]) - set(got.get("env", []))):
            checker.fail(f"wiring {name}", f"the template gives it {var}; the local stack does not")
        for var in sorted(set(got.get("env", [])) - set(want["env"])):
            checker.fail(f"wiring {name}", f"the local stack gives it {var}; the template does not")
        for queue in sorted(set(got.get("sends", [])) - set(want["sends"])):
            checker.fail(f"wiring {name}", f"the local stack gives it a sender for {queue}, which its role may not send to")
        for queue in sorted(set(want["sends"]) - set(got.get("sends", []))):
            checker.fail(f"wiring {name}", f"its role may send to {queue}; the local stack gives it no sender for it")
        if want["token"] != got.get("token"):
            checker.fail(f"wiring {name}", f"holds the gateway token {got.get('token')!r} locally, {want['token']!r} in the template")
        if want["token"] and want["token"]["role"] != want["token"]["secret_role"]:
            checker.fail(name, f"acts as {want['token']['role']!r} with the token of {want['token']['secret_role']!r}")
    check_local_roles(checker, local)
