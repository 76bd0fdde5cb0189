"""The template lint's checks of the table's indexes and the API's contract: the sweep and pending
approvals' indexes and who may query them, the routes anyone may call, the customers' index and
the API's CORS origins. Functions over check_template's Checker (as in check_allowlists)."""

SWEEP_INDEX = {"IndexName": "sweep", "KeySchema": [{"AttributeName": "sweep_shard", "KeyType": "HASH"},
                                                   {"AttributeName": "deadline_ms", "KeyType": "RANGE"}]}
CUSTOMER_INDEX = {"IndexName": "customer", "KeySchema": [{"AttributeName": "customer_id", "KeyType": "HASH"},
                                                         {"AttributeName": "created_at_ms", "KeyType": "RANGE"}]}
PENDING_INDEX = {"IndexName": "pending", "KeySchema": [{"AttributeName": "pending_pk", "KeyType": "HASH"},
                                                       {"AttributeName": "pending_sk", "KeyType": "RANGE"}]}
# Routes anyone may call: a health check and the API's contract.
OPEN_ROUTES = {"GET /health", "GET /openapi.json"}


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
