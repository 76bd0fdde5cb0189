"""The template lint's checks of the table's indexes and the API's contract: the sweep and pending
approvals' indexes and who may query them, the routes anyone may call, the customers' index and
the API's CORS origins, the streaming API (its URL, timeout and variables) and every public function
URL. Functions over check_template's Checker (as in check_allowlists)."""

SWEEP_INDEX = {"IndexName": "sweep", "KeySchema": [{"AttributeName": "sweep_shard", "KeyType": "HASH"},
                                                   {"AttributeName": "deadline_ms", "KeyType": "RANGE"}]}
CUSTOMER_INDEX = {"IndexName": "customer", "KeySchema": [{"AttributeName": "customer_id", "KeyType": "HASH"},
                                                         {"AttributeName": "created_at_ms", "KeyType": "RANGE"}]}
PENDING_INDEX = {"IndexName": "pending", "KeySchema": [{"AttributeName": "pending_pk", "KeyType": "HASH"},
                                                       {"AttributeName": "pending_sk", "KeyType": "RANGE"}]}
# Routes anyone may call: a health check and the API's contract.
OPEN_ROUTES = {"GET /health", "GET /openapi.json"}
# Functions whose URL may be public (AuthType NONE), and why: the gateway checks each role's bearer token itself
# (prod keeps it AWS_IAM: ProdGatewayNotPublic); the streaming API verifies customers' JWTs itself, because a
# function URL has no JWT authorizer (and its NONE URL is allowed only while it does: check_public_urls).
PUBLIC_URL_FUNCTIONS = {"ToolGateway", "StreamingApi"}
# The streaming API: the function, and how long a request on it may run past the deadline
# (orchestrator::openai::max_duration: followed for the deadline + 60 s, answered within 10 s more) plus a margin
# for the response's last bytes; Lambda's longest timeout.
STREAMING_FUNCTION = "StreamingApi"
STREAMING_BEYOND_DEADLINE_SECS = 60 + 10 + 10
LAMBDA_MAX_TIMEOUT_SECS = 900
# The orchestrator's variables the streaming API does not get (it serves no approvals route) and the ones it gets
# on top (the HTTP API's JWT authorizer, checked in the function).
STREAMING_WITHOUT = {"APPROVAL_KEY_SECRET_ARN", "OPERATOR_PRINCIPALS"}
STREAMING_EXTRA = {"JWT_ISSUER": "JwtIssuer", "JWT_AUDIENCE": "JwtAudience", "JWT_JWKS_URL": "JwtJwksUrl"}


def check_sweep(checker, functions):
    """The sweep's sparse index exists, a scheduled function sweeps it, and that function's role names the index."""
    # The conversations table is the one with a stream (the aggregator's); another table (the shop's
    # ledger) holds no conversation and needs no sweep index.
    tables = [(k, r) for k, r in checker.resources.items() if r["Type"] == "AWS::DynamoDB::Table"
              and r["Properties"].get("StreamSpecification")]
    if not tables:
        checker.fail("sweep", "no conversations table (a table with a stream) to sweep")
    for table, r in tables:
        indexes = r["Properties"].get("GlobalSecondaryIndexes") or []
        index = next((i for i in indexes if i.get("IndexName") == SWEEP_INDEX["IndexName"]), None)
        if index is None or index.get("KeySchema") != SWEEP_INDEX["KeySchema"]:
            checker.fail(table, f"no sweep index {SWEEP_INDEX!r}")
        index = next((i for i in indexes if i.get("IndexName") == PENDING_INDEX["IndexName"]), None)
        if index is None or index.get("KeySchema") != PENDING_INDEX["KeySchema"]:
            checker.fail(table, f"no pending approvals' index {PENDING_INDEX!r}")
    schedules = [r for r in checker.resources.values() if r["Type"] == "AWS::Scheduler::Schedule"]
    swept = [checker.target(r["Properties"].get("Target", {}).get("Arn")) for r in schedules]
    sweepers = [f for f in swept if f in functions
                and ((functions[f]["Properties"].get("Environment") or {}).get("Variables") or {}).get("WORKER_MODE") == "sweep"]
    if not sweepers:
        checker.fail("sweep", "no schedule invokes a function in WORKER_MODE=sweep")
    for f in sweepers:
        role = checker.target(functions[f]["Properties"].get("Role"))
        if not checker.allows(role, "dynamodb:Query", lambda res: isinstance(res, dict) and "Fn::Sub" in res
                           and str(res["Fn::Sub"]).endswith(f"/index/{SWEEP_INDEX['IndexName']}")):
            checker.fail(f, f"its role does not name the sweep index (dynamodb:Query on <table>/index/{SWEEP_INDEX['IndexName']})")
        if not checker.allows(role, "dynamodb:Query", lambda res: isinstance(res, dict) and "Fn::Sub" in res
                           and str(res["Fn::Sub"]).endswith(f"/index/{PENDING_INDEX['IndexName']}")):
            checker.fail(f, f"its role does not name the pending approvals' index (dynamodb:Query on <table>/index/{PENDING_INDEX['IndexName']})")

def check_api(checker, functions):
    """The API's contract as deployed: open routes, the customers' list, its index and CORS from one list."""
    routes = {}
    for name, r in checker.resources.items():
        if r["Type"] == "AWS::ApiGatewayV2::Route":
            routes[checker.value(r["Properties"].get("RouteKey"))] = (name, checker.chosen(r["Properties"]))
    for key in sorted(OPEN_ROUTES):
        if key not in routes:
            checker.fail("api", f"no route {key}")
        elif routes[key][1].get("AuthorizationType") != "NONE":
            checker.fail(routes[key][0], f"{key} must need no credential (AuthorizationType NONE)")
    post = routes.get("POST /conversations")
    # A customer's list and follow-up messages: the same callers as the first message.
    for key in ("GET /conversations", "POST /conversations/{id}/messages"):
        route = routes.get(key)
        if route is None:
            checker.fail("api", f"no route {key}")
        elif post is not None and (route[1].get("AuthorizationType"), route[1].get("AuthorizerId")) != (
                post[1].get("AuthorizationType"), post[1].get("AuthorizerId")):
            checker.fail(route[0], f"{key} is not authorised as POST /conversations is")
    # The operators' routes: IAM-signed whatever customers use (decisions, and a person's answer to a hand-off).
    for key in ("GET /approvals", "POST /approvals/{id}", "GET /operator/conversations/{id}",
                "POST /operator/conversations/{id}/messages"):
        route = routes.get(key)
        if route is None:
            checker.fail("api", f"no route {key}")
        elif route[1].get("AuthorizationType") != "AWS_IAM":
            checker.fail(route[0], f"{key} is for operators: AuthorizationType AWS_IAM")
    integration = next((checker.chosen(r["Properties"]) for r in checker.resources.values()
                        if r["Type"] == "AWS::ApiGatewayV2::Integration"), {})
    api_fn = checker.target(integration.get("IntegrationUri"))
    table = checker.resources.get("Table", {}).get("Properties", {})
    index = next((i for i in table.get("GlobalSecondaryIndexes") or [] if i.get("IndexName") == CUSTOMER_INDEX["IndexName"]), None)
    if index is None or index.get("KeySchema") != CUSTOMER_INDEX["KeySchema"]:
        checker.fail("Table", f"no customers' index {CUSTOMER_INDEX!r} (GET /conversations)")
    if api_fn in functions:
        role = checker.target(functions[api_fn]["Properties"].get("Role"))
        if not checker.allows(role, "dynamodb:Query", lambda res: isinstance(res, dict) and "Fn::Sub" in res
                           and str(res["Fn::Sub"]).endswith(f"/index/{CUSTOMER_INDEX['IndexName']}")):
            checker.fail(api_fn, f"its role does not name the customers' index (dynamodb:Query on <table>/index/{CUSTOMER_INDEX['IndexName']})")
        if not checker.allows(role, "dynamodb:Query", lambda res: isinstance(res, dict) and "Fn::Sub" in res
                           and str(res["Fn::Sub"]).endswith(f"/index/{PENDING_INDEX['IndexName']}")):
            checker.fail(api_fn, f"its role does not name the pending approvals' index (dynamodb:Query on <table>/index/{PENDING_INDEX['IndexName']})")
        env = (functions[api_fn]["Properties"].get("Environment") or {}).get("Variables") or {}
        if env.get("CORS_ALLOWED_ORIGINS") != {"Fn::Join": [",", {"Ref": "CorsAllowOrigins"}]}:
            checker.fail(api_fn, "CORS_ALLOWED_ORIGINS is not the CorsAllowOrigins parameter's list")
    else:
        checker.fail("api", "no function behind the API's integration")
    apis = [checker.chosen(r["Properties"]) for r in checker.resources.values() if r["Type"] == "AWS::ApiGatewayV2::Api"]
    origins = str(checker.value({"Ref": "CorsAllowOrigins"}) or "").strip(", ")
    for api in apis:
        cors = api.get("CorsConfiguration")
        if origins and (not cors or cors.get("AllowOrigins") != {"Ref": "CorsAllowOrigins"}):
            checker.fail("HttpApi", "CorsConfiguration.AllowOrigins is not the CorsAllowOrigins parameter")


def check_streaming(checker, functions):
    """The streaming API: a RESPONSE_STREAM URL, a timeout above the longest request for this environment's deadline
    (and within Lambda's 900 s), and the orchestrator's variables but the approvals', plus the JWT authorizer's."""
    fn = functions.get(STREAMING_FUNCTION)
    if fn is None:
        checker.fail("streaming", f"no {STREAMING_FUNCTION} function (the long-running routes need a streaming URL)")
        return
    p = fn["Properties"]
    urls = [checker.chosen(r["Properties"]) for r in checker.resources.values() if r["Type"] == "AWS::Lambda::Url"
            and checker.target(r["Properties"].get("TargetFunctionArn")) == STREAMING_FUNCTION]
    if not urls or any(u.get("InvokeMode") != "RESPONSE_STREAM" for u in urls):
        checker.fail(STREAMING_FUNCTION, "needs a function URL with InvokeMode RESPONSE_STREAM (a buffered URL cuts at 6 MB and streams nothing)")
    timeout, deadline = checker.number(p.get("Timeout")), checker.number({"Ref": "DeadlineSecs"})
    if timeout is None or deadline is None:
        checker.fail(STREAMING_FUNCTION, "its Timeout or DeadlineSecs is not a number")
    elif timeout < deadline + STREAMING_BEYOND_DEADLINE_SECS:
        checker.fail(STREAMING_FUNCTION, f"timeout {timeout:g} s < DeadlineSecs {deadline:g} + {STREAMING_BEYOND_DEADLINE_SECS} s: "
                     "a chat completion is cut before its turn's deadline answer reaches the client")
    elif timeout > LAMBDA_MAX_TIMEOUT_SECS:
        checker.fail(STREAMING_FUNCTION, f"timeout {timeout:g} s > Lambda's {LAMBDA_MAX_TIMEOUT_SECS} s")
    env = (p.get("Environment") or {}).get("Variables") or {}
    orchestrator = ((functions.get("Orchestrator", {}).get("Properties", {}).get("Environment") or {}).get("Variables") or {})
    want = {k: v for k, v in orchestrator.items() if k not in STREAMING_WITHOUT}
    want.update({k: {"Ref": param} for k, param in STREAMING_EXTRA.items()})
    for var in sorted(set(want) | set(env)):
        if env.get(var) != want.get(var):
            checker.fail(STREAMING_FUNCTION, f"{var} is {env.get(var)!r}, want the orchestrator's {want.get(var)!r} "
                         "(the same conversations, limits and identities on both entry points)")


def check_public_urls(checker):
    """Every NONE function URL belongs to PUBLIC_URL_FUNCTIONS and has both permissions Lambda asks for, each scoped to
    the URL (a public InvokeFunction not limited to the URL lets anyone invoke the function with any event); the
    streaming URL is NONE only while the function identifies callers itself, with the HTTP API authorizer's rules."""
    live = {k: r for k, r in checker.resources.items()
            if "Condition" not in r or checker.condition(r["Condition"])}
    public = {}
    for name, r in live.items():
        p = checker.chosen(r.get("Properties", {}))
        if r["Type"] == "AWS::Lambda::Permission" and p.get("Principal") == "*":
            fn, action = checker.target(p.get("FunctionName")), str(p.get("Action", "")).lower()
            if action == "lambda:invokefunctionurl" and p.get("FunctionUrlAuthType") == "NONE":
                public.setdefault(fn, set()).add(action)
            elif action == "lambda:invokefunction" and p.get("InvokedViaFunctionUrl") in (True, "true"):
                public.setdefault(fn, set()).add(action)
            else:
                checker.fail(name, f"a public permission ({p.get('Action')}) not limited to a NONE function URL")
    for name, r in live.items():
        p = checker.chosen(r.get("Properties", {}))
        if r["Type"] != "AWS::Lambda::Url" or checker.value(p.get("AuthType")) != "NONE":
            continue
        fn = checker.target(p.get("TargetFunctionArn"))
        if fn not in PUBLIC_URL_FUNCTIONS:
            checker.fail(name, f"{fn}'s function URL is public (AuthType NONE); only {sorted(PUBLIC_URL_FUNCTIONS)} check callers themselves")
        for action in ("lambda:invokefunctionurl", "lambda:invokefunction"):
            if action not in public.get(fn, set()):
                checker.fail(name, f"a NONE URL needs a public {action} permission (since October 2025 Lambda asks for both)")
        if fn == STREAMING_FUNCTION:
            mode = checker.value({"Ref": "AuthMode"})
            if mode == "iam":
                checker.fail(name, "AuthMode=iam: the streaming URL must be AWS_IAM (callers sign, as on the HTTP API)")
            if mode == "none" and checker.value({"Ref": "Stage"}) == "prod":
                checker.fail(name, "a public streaming URL in prod needs AuthMode=jwt (the function verifies the token)")
    authorizer = next((checker.chosen(r["Properties"]) for r in live.values()
                       if r["Type"] == "AWS::ApiGatewayV2::Authorizer"), None)
    fn = checker.resources.get(STREAMING_FUNCTION, {}).get("Properties", {})
    env = (fn.get("Environment") or {}).get("Variables") or {}
    if authorizer is not None:
        jwt = authorizer.get("JwtConfiguration") or {}
        if env.get("JWT_ISSUER") != jwt.get("Issuer") or [env.get("JWT_AUDIENCE")] != jwt.get("Audience"):
            checker.fail(STREAMING_FUNCTION, "JWT_ISSUER / JWT_AUDIENCE are not the HTTP API authorizer's issuer and audience")
