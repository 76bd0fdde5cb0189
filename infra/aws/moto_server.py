#!/usr/bin/env python3
# The local AWS emulator: moto's server with DynamoDB requests serialised, so a conditional write is atomic per item as on DynamoDB.
# Usage: .venv/bin/python infra/aws/moto_server.py -H 127.0.0.1 -p 5000   (infra/aws/moto.sh runs it)
#
# Why: moto's threaded server applies a conditional UpdateItem without holding the item, so under load two
# racing counts can both see the same `remaining` - something DynamoDB, which applies each conditional write
# atomically per item, never does. Such an emulator would report double counts and hangs AWS cannot produce,
# and hide the ones it can. One lock around every DynamoDB and DynamoDB Streams request restores DynamoDB's
# per-item atomicity (and more: all table requests run one at a time). SQS requests - long polls among them -
# never wait behind it, so nothing stalls behind a 20-second ReceiveMessage.
#
# With --iam, IAM is enforced as AWS enforces it (moto's INITIAL_NO_AUTH_ACTION_COUNT is 0 from the start, so the
# switch is server-wide: an IAM run needs its own port): every request must be signed by an IAM user's key and be
# allowed by that user's policies. An administrator (ADMIN_KEY_ID / ADMIN_SECRET, emulator-only values) is created
# before the first request; the local stack signs its bootstrap, its stream readers and its operator with it and
# creates one user per function from template.yaml's policies. Two things moto does not do as AWS does are
# corrected here, so a policy means on the emulator what it means on AWS:
#   - DynamoDB is authorised against the table's ARN (the index's for a Query or Scan of an index), not "*", and
#     TransactWriteItems / TransactGetItems by each item's own action (PutItem, UpdateItem, DeleteItem,
#     ConditionCheckItem, GetItem) on its table - AWS has no IAM action for the transaction itself;
#   - SQS batch calls are authorised as their single-message action (SendMessageBatch as sqs:SendMessage ...),
#     as AWS does.
# moto ignores conditions it does not know (dynamodb:LeadingKeys among them): the key prefixes a role may write
# are the template lint's to check (infra/aws/check_template.py), not the emulator's.
import argparse
import json
import os
import signal
import sys
import threading
from urllib.parse import urlparse

from moto.dynamodb.comparisons import get_filter_expression
from moto.dynamodb.exceptions import (
    ConditionalCheckFailed,
    MockValidationException,
    MultipleTransactionsException,
    TransactionCanceledException,
)
from moto import settings
from moto.core import DEFAULT_ACCOUNT_ID
from moto.core.authorization import ActionAuthenticatorMixin
from moto.dynamodb.models import DynamoDBBackend
from moto.dynamodb.responses import DynamoHandler
from moto.iam.access_control import IAMRequest
from moto.iam.models import iam_backends
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from moto.sqs.responses import SQSResponse
from werkzeug.serving import run_simple

# The emulator's administrator with --iam (emulator-only values: no AWS account knows them).
ADMIN_USER = "emulator-admin"
ADMIN_KEY_ID = "AKIAEMULATORADMIN000"
ADMIN_SECRET = "emulator-admin-secret-not-for-aws"


def checked_first(original):
    """TransactWriteItems as DynamoDB runs it: every condition evaluated against the state before the
    transaction, then all writes or none. Requests of a shape this does not know go to moto's own code."""

    def transact_write_items(self, transact_items):
        if len(transact_items) > 100:
            return original(self, transact_items)
        errors, targets, plan = [], set(), []
        for entry in transact_items:
            if len(entry) != 1:
                return original(self, transact_items)  # moto's own validation error
            op_type, op = next(iter(entry.items()))
            table_name = op.get("TableName")
            if op_type not in {"ConditionCheck", "Put", "Delete", "Update"} or table_name not in self.tables:
                return original(self, transact_items)
            table = self.get_table(table_name)
            if op_type == "Put":
                attrs = op["Item"]
                key = {table.hash_key_attr: attrs[table.hash_key_attr]}
                if table.range_key_attr is not None:
                    key[table.range_key_attr] = attrs[table.range_key_attr]
            else:
                key = op["Key"]
            target = (str(table_name), str(dict(sorted(key.items()))))
            if target in targets:
                raise MultipleTransactionsException()
            targets.add(target)
            current = self.get_item(table_name, key)
            plan.append((op_type, op, key, current))
            condition = op.get("ConditionExpression")
            if condition is None:
                errors.append((None, None, None))
                continue
            check = get_filter_expression(
                condition, op.get("ExpressionAttributeNames"), op.get("ExpressionAttributeValues")
            )
            if check.expr(current):
                errors.append((None, None, None))
                continue
            old = None
            if op.get("ReturnValuesOnConditionCheckFailure") == "ALL_OLD" and current:
                old = current.to_json()["Attributes"]
            errors.append(("ConditionalCheckFailed", ConditionalCheckFailed(item=old).message, old))
        if any(code is not None for code, _, _ in errors):
            raise TransactionCanceledException(errors)
        # Every condition holds: write. moto validates a write as it makes it (DynamoDB validates the request
        # first), so a write refused halfway puts back the items written before it. Unlike moto's own code this
        # copies no table: a copy of every item on every transaction made a 2,000-item table take 0.5 s each.
        written = []
        try:
            for index, (op_type, op, key, before) in enumerate(plan):
                table_name = op["TableName"]
                if op_type == "Put":
                    self.put_item(table_name, op["Item"])
                elif op_type == "Delete":
                    self.delete_item(table_name, key)
                elif op_type == "Update":
                    self.update_item(
                        table_name,
                        key,
                        update_expression=op["UpdateExpression"],
                        expression_attribute_names=op.get("ExpressionAttributeNames"),
                        expression_attribute_values=op.get("ExpressionAttributeValues"),
                    )
                written.append((table_name, key, before))
        except Exception as e:
            for table_name, key, before in reversed(written):
                if before is None:
                    self.delete_item(table_name, key)
                else:
                    self.put_item(table_name, before.to_json()["Attributes"])
            if isinstance(e, (MultipleTransactionsException, MockValidationException)):
                raise
            failed = [(None, None, None)] * len(plan)
            failed[index] = (type(e).__name__, str(e), None)
            raise TransactionCanceledException(failed) from e

    return transact_write_items


DynamoDBBackend.transact_write_items = checked_first(DynamoDBBackend.transact_write_items)


# The IAM action of each item of a transaction (AWS authorises the items, not the transaction).
TRANSACTION_ITEM_ACTIONS = {"Put": "PutItem", "Update": "UpdateItem", "Delete": "DeleteItem",
                            "ConditionCheck": "ConditionCheckItem", "Get": "GetItem"}
# SQS batch calls are authorised as their single-message action.
SQS_BATCH_ACTIONS = {"SendMessageBatch": "SendMessage", "DeleteMessageBatch": "DeleteMessage",
                     "ChangeMessageVisibilityBatch": "ChangeMessageVisibility"}


def dynamodb_checks(action, body, region, account):
    """The (IAM action, resource ARN) pairs AWS authorises a DynamoDB request by."""
    def arn(table):
        return f"arn:aws:dynamodb:{region}:{account}:table/{table}"

    if action in ("TransactWriteItems", "TransactGetItems"):
        return [(TRANSACTION_ITEM_ACTIONS.get(op, action), arn(spec.get("TableName", "")))
                for item in body.get("TransactItems", []) for op, spec in item.items()]
    if action in ("BatchWriteItem", "BatchGetItem"):
        return [(action, arn(table)) for table in body.get("RequestItems", {})]
    table = body.get("TableName")
    if not table:
        return [(action, "*")]
    if body.get("IndexName"):
        return [(action, f"{arn(table)}/index/{body['IndexName']}")]
    return [(action, arn(table))]


def authorise(handler, checks):
    """moto's own check (signature, then each action on its resource), once the no-auth allowance is spent."""
    if ActionAuthenticatorMixin.request_count < settings.INITIAL_NO_AUTH_ACTION_COUNT:
        ActionAuthenticatorMixin.request_count += 1
        return
    parsed = urlparse(handler.uri)
    path = parsed.path + ("?" + parsed.query if parsed.query else "")
    for index, (action, resource) in enumerate(checks):
        request = IAMRequest(account_id=handler.current_account, method=handler.method, path=path,
                             data=handler.data, body=handler.raw_body, headers=handler.headers, action=action)
        if index == 0:
            request.check_signature()
        request.check_action_permitted(resource)


def dynamodb_authorisation(self, resource="*"):
    body = self.body if isinstance(self.body, dict) else json.loads(self.body or "{}")
    authorise(self, dynamodb_checks(self._get_action(), body, self.region, self.current_account))


def sqs_authorisation(self, resource="*"):
    action = self._get_action()
    authorise(self, [(SQS_BATCH_ACTIONS.get(action, action), resource)])


def enforce_iam():
    """IAM from the first request on, with the administrator created before it."""
    iam = iam_backends[DEFAULT_ACCOUNT_ID]["aws"]
    iam.create_user("us-east-1", ADMIN_USER)
    iam.put_user_policy(ADMIN_USER, "admin", json.dumps(
        {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}))
    key = iam.create_access_key(ADMIN_USER)
    key.access_key_id, key.secret_access_key = ADMIN_KEY_ID, ADMIN_SECRET
    DynamoHandler._authenticate_and_authorize_normal_action = dynamodb_authorisation
    SQSResponse._authenticate_and_authorize_normal_action = sqs_authorisation
    settings.INITIAL_NO_AUTH_ACTION_COUNT = 0
    ActionAuthenticatorMixin.request_count = 0


class SerialisedDynamoDB:
    """WSGI middleware: requests whose X-Amz-Target names DynamoDB or DynamoDB Streams run one at a time."""

    def __init__(self, app):
        self.app = app
        self.lock = threading.Lock()

    def __call__(self, environ, start_response):
        target = environ.get("HTTP_X_AMZ_TARGET", "")
        if not target.startswith("DynamoDB"):
            return self.app(environ, start_response)
        with self.lock:
            # The body is produced inside the lock: a WSGI app may do its work lazily while it is iterated.
            result = self.app(environ, start_response)
            try:
                body = b"".join(result)
            finally:
                close = getattr(result, "close", None)
                if close is not None:
                    close()
        return [body]


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, default=int(os.environ.get("MOTO_PORT", 5000)))
    parser.add_argument("--iam", action="store_true", help="enforce IAM from the first request (its own port)")
    args = parser.parse_args()
    os.environ.setdefault("MOTO_PORT", str(args.port))
    if args.iam:
        enforce_iam()
        print(f"IAM enforced; administrator {ADMIN_KEY_ID}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    app = DomainDispatcherApplication(create_backend_app)
    run_simple(args.host, args.port, SerialisedDynamoDB(app), threaded=True)


if __name__ == "__main__":
    main()
