#!/usr/bin/env python3
# Creates the swarm's table (stream NEW_IMAGE, TTL) and queues (tasks, refund, each with a DLQ) on the local emulator, and writes the env file `cargo lambda watch` reads.
# Usage: .venv/bin/python infra/aws/bootstrap.py [--endpoint http://127.0.0.1:5000] [--prefix lambda-swarm-local] [--env-file target/moto/lambda.env]
import argparse
import json
import os
import sys
import tomllib

import boto3

# Same shape and settings as template.yaml: the timing table's visibility timeouts and redrive.
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "core", "timings.toml"), "rb") as f:
    _TIMINGS = tomllib.load(f)
WORKER_VISIBILITY_SECS = _TIMINGS["queues"]["tasks"]["visibility_timeout_secs"]
DLQ_VISIBILITY_SECS = _TIMINGS["queues"]["dead_letters"]["visibility_timeout_secs"]
MAX_RECEIVE_COUNT = _TIMINGS["queues"]["max_receive_count"]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--endpoint", default=os.environ.get("SWARM_AWS_ENDPOINT", f"http://127.0.0.1:{os.environ.get('MOTO_PORT', '5000')}"))
    ap.add_argument("--prefix", default="lambda-swarm-local")
    ap.add_argument("--env-file", default=os.path.join("target", "moto", "lambda.env"))
    args = ap.parse_args()

    session = boto3.session.Session(aws_access_key_id="test", aws_secret_access_key="test", region_name="us-east-1")
    ddb = session.client("dynamodb", endpoint_url=args.endpoint)
    sqs = session.client("sqs", endpoint_url=args.endpoint)

    table = f"{args.prefix}-table"
    if table not in ddb.list_tables()["TableNames"]:
        ddb.create_table(
            TableName=table,
            AttributeDefinitions=[{"AttributeName": "PK", "AttributeType": "S"}, {"AttributeName": "SK", "AttributeType": "S"},
                                  {"AttributeName": "sweep_shard", "AttributeType": "N"},
                                  {"AttributeName": "deadline_ms", "AttributeType": "N"},
                                  {"AttributeName": "customer_id", "AttributeType": "S"},
                                  {"AttributeName": "created_at_ms", "AttributeType": "N"},
                                  {"AttributeName": "pending_pk", "AttributeType": "S"},
                                  {"AttributeName": "pending_sk", "AttributeType": "S"}],
            KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}, {"AttributeName": "SK", "KeyType": "RANGE"}],
            # The sweep's sparse, sharded index, as template.yaml declares it.
            GlobalSecondaryIndexes=[{
                "IndexName": "sweep",
                "KeySchema": [{"AttributeName": "sweep_shard", "KeyType": "HASH"},
                              {"AttributeName": "deadline_ms", "KeyType": "RANGE"}],
                "Projection": {"ProjectionType": "KEYS_ONLY"},
            }, {
                # A customer's conversations, newest first (GET /conversations).
                "IndexName": "customer",
                "KeySchema": [{"AttributeName": "customer_id", "KeyType": "HASH"},
                              {"AttributeName": "created_at_ms", "KeyType": "RANGE"}],
                "Projection": {"ProjectionType": "ALL"},
            }, {
                # The pending approvals (GET /approvals?status=pending, the waiting gauges).
                "IndexName": "pending",
                "KeySchema": [{"AttributeName": "pending_pk", "KeyType": "HASH"},
                              {"AttributeName": "pending_sk", "KeyType": "RANGE"}],
                "Projection": {"ProjectionType": "ALL"},
            }],
            BillingMode="PAY_PER_REQUEST",
            StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_IMAGE"},
        )
        ddb.get_waiter("table_exists").wait(TableName=table, WaiterConfig={"Delay": 1, "MaxAttempts": 30})
        ddb.update_time_to_live(TableName=table, TimeToLiveSpecification={"Enabled": True, "AttributeName": "ttl"})

    def queue_with_dlq(name):
        dlq_url = sqs.create_queue(QueueName=f"{name}-dlq", Attributes={"VisibilityTimeout": str(DLQ_VISIBILITY_SECS)})["QueueUrl"]
        dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        url = sqs.create_queue(
            QueueName=name,
            Attributes={
                "VisibilityTimeout": str(WORKER_VISIBILITY_SECS),
                "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(MAX_RECEIVE_COUNT)}),
            },
        )["QueueUrl"]
        return url, dlq_url

    tasks, tasks_dlq = queue_with_dlq(f"{args.prefix}-tasks")
    refund, refund_dlq = queue_with_dlq(f"{args.prefix}-refund")

    env = {
        "AWS_ENDPOINT_URL": args.endpoint,
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_REGION": "us-east-1",
        "TABLE_NAME": table,
        "TASKS_QUEUE_URL": tasks,
        "REFUND_QUEUE_URL": refund,
        "TASKS_DLQ_URL": tasks_dlq,
        "REFUND_DLQ_URL": refund_dlq,
        "DEADLINE_SECS": "120",
    }
    os.makedirs(os.path.dirname(args.env_file) or ".", exist_ok=True)
    with open(args.env_file, "w") as f:
        f.write("# Written by infra/aws/bootstrap.py for `cargo lambda watch --env-file`; emulator only, no real credentials.\n")
        for k, v in env.items():
            f.write(f"{k}={v}\n")
    print(f"bootstrap: table {table}, queues {tasks} (+dlq), {refund} (+dlq) on {args.endpoint}")
    print(f"bootstrap: wrote {args.env_file}")


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # noqa: BLE001 - one clear line for the operator
        print(f"bootstrap: failed: {e}. Is the emulator running? (infra/aws/moto.sh start)", file=sys.stderr)
        sys.exit(1)
