#!/usr/bin/env python3
# Expands template.yaml through the SAM translator into plain CloudFormation JSON (what CloudFormation itself would run), without AWS credentials.
# Usage: .venv/bin/python infra/aws/translate.py [template.yaml] > expanded.json
import json
import os
import sys

from cfnlint.decode import cfn_yaml
from samtranslator.translator.transform import transform


class NoManagedPolicies:
    """The template attaches no managed policies (least privilege, inline only), so none need looking up."""

    def load(self):
        return {}


def expand(path):
    # The translator asks boto for a region; any will do for a local expansion.
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    template = cfn_yaml.load(path)
    # As `sam package` would: local code paths become S3 locations.
    globals_fn = template.get("Globals", {}).get("Function", {})
    if isinstance(globals_fn.get("CodeUri"), str) and not globals_fn["CodeUri"].startswith("s3://"):
        globals_fn["CodeUri"] = "s3://lambda-swarm-artifacts/code.zip"
    for name, resource in template.get("Resources", {}).items():
        props = resource.get("Properties", {})
        if resource.get("Type") == "AWS::Serverless::Function" and isinstance(props.get("CodeUri"), str):
            if not props["CodeUri"].startswith("s3://"):
                props["CodeUri"] = f"s3://lambda-swarm-artifacts/{name}.zip"
    # Pseudo parameters get placeholder values; the translator only needs them to exist.
    params = {"AWS::Region": "us-east-1", "AWS::AccountId": "123456789012", "AWS::Partition": "aws"}
    return transform(json.loads(json.dumps(template)), params, NoManagedPolicies())


if __name__ == "__main__":
    path = sys.argv[1] if len(sys.argv) > 1 else "template.yaml"
    json.dump(expand(path), sys.stdout, indent=1, sort_keys=True)
    print()
