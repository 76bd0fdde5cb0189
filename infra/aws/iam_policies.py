#!/usr/bin/env python3
# Writes each function's IAM policies as template.yaml grants them (expanded by the SAM translator, the parameter defaults' conditions resolved), resources named by the template's logical ids: the copy the local stack loads into the emulator with IAM on (infra/aws/iam-policies.json).
# Usage: .venv/bin/python infra/aws/iam_policies.py [template.yaml] > infra/aws/iam-policies.json   (infra/aws/lint.sh checks the file is current)
#
# A resource is written as the template names it: "${TasksQueue.Arn}" (Fn::GetAtt), "${LlmApiKeySecret}" (Ref),
# "${Table.Arn}/index/sweep" (Fn::Sub), or as it is ("*"). The local stack puts the run's ARNs in place of the
# table, its stream and the queues it provisions, and an ARN that names nothing for the rest (log groups,
# secrets, functions: services the emulator run never calls). Conditions are kept as they are; the emulator
# ignores dynamodb:LeadingKeys, which check_template.py checks instead.
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_template import Checker  # noqa: E402
from translate import expand  # noqa: E402


def named(value, checker):
    """A resource value with its references as "${LogicalId[.Attribute]}" strings."""
    if isinstance(value, list):
        return [named(v, checker) for v in value]
    if isinstance(value, dict):
        if "Fn::GetAtt" in value:
            att = value["Fn::GetAtt"]
            logical, attribute = (att[0], att[1]) if isinstance(att, list) else att.split(".", 1)
            return "${%s.%s}" % (logical, attribute)
        if "Ref" in value:
            return "${%s}" % value["Ref"]
        if "Fn::Sub" in value and isinstance(value["Fn::Sub"], str):
            return value["Fn::Sub"]
        raise SystemExit(f"iam_policies: a resource this script cannot name: {value!r}")
    return value


def policies(template):
    """{function: {"role": role, "policies": {name: document}}} for every function of the template."""
    checker = Checker(template, {}, "defaults")
    out = {}
    for name, fn in sorted(template["Resources"].items()):
        if fn["Type"] != "AWS::Lambda::Function":
            continue
        if "Condition" in fn and not checker.condition(fn["Condition"]):
            continue
        role = checker.target(fn["Properties"].get("Role"))
        documents = {}
        for policy in template["Resources"][role]["Properties"].get("Policies", []):
            doc = checker.chosen(policy["PolicyDocument"])
            statements = doc.get("Statement", [])
            for st in statements if isinstance(statements, list) else [statements]:
                st["Resource"] = named(st.get("Resource"), checker)
            documents[policy["PolicyName"]] = doc
        out[name] = {"role": role, "policies": documents}
    return out


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "template.yaml"
    json.dump(policies(expand(path)), sys.stdout, indent=1, sort_keys=True)
    print()


if __name__ == "__main__":
    main()
