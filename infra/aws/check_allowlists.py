#!/usr/bin/env python3
# Checks of template.yaml that check_template.py runs: each gateway role's tool list is an allowlist (no wildcard,
# so a new money tool on any upstream reaches no role until named), every pipe reading a stream has a dead-letter
# destination an alarm watches and its role may send to, and the local stack gives its gateway roles the same lists.
# Usage: imported by check_template.py (Checker.run, Checker.check_wiring); no command line of its own.
import json
import re

# Glob characters of the gateway's tool patterns (functions/tool-gateway/src/catalog.rs glob_match).
WILDCARD = re.compile(r"[*?\[]")
# A ${Name} substitution of Fn::Sub (not the escaped ${!literal}).
SUBSTITUTION = re.compile(r"\$\{(?!!)[^}]*\}")


def gateway_roles(checker):
    """{role: {"tools": [...], "deny": [...]}} of the gateway's GATEWAY_CONFIG, or None when no function has one.
    The Fn::Sub's substitutions are replaced by 0 (they are upstreams and numbers, never role lists)."""
    for r in checker.resources.values():
        if r["Type"] != "AWS::Lambda::Function":
            continue
        config = ((r["Properties"].get("Environment") or {}).get("Variables") or {}).get("GATEWAY_CONFIG")
        if config is None:
            continue
        text = config["Fn::Sub"] if isinstance(config, dict) and "Fn::Sub" in config else config
        text = text[0] if isinstance(text, list) else text
        try:
            parsed = json.loads(SUBSTITUTION.sub("0", text))
        except (TypeError, ValueError) as e:
            checker.fail("GATEWAY_CONFIG", f"does not parse as JSON: {e}")
            return None
        return {name: {"tools": role.get("tools", []), "deny": role.get("deny", [])}
                for name, role in (parsed.get("roles") or {}).items()}
    return None


def check_gateway_roles(checker):
    """Every role lists its tools by name: a wildcard (`shop__*` minus a deny) would hand a new tool - a new way to
    move money on another upstream - to every role whose pattern it matches."""
    roles = gateway_roles(checker)
    if roles is None:
        return
    for name, role in sorted(roles.items()):
        for tool in role["tools"]:
            if WILDCARD.search(tool):
                checker.fail(f"GATEWAY_CONFIG role {name}",
                             f"tool list holds the wildcard {tool!r}; name each tool (an allowlist)")
        if role["deny"]:
            checker.fail(f"GATEWAY_CONFIG role {name}",
                         f"has a deny list {role['deny']!r}: an allowlist names what the role may use, nothing else")


def check_pipes(checker):
    """A pipe reading a stream gives up a record after its retries: it must reach an SQS dead-letter destination
    that an alarm watches and the pipe's role may send to, or the event (a hand-off to a person) is lost unseen."""
    for name, r in checker.resources.items():
        if r["Type"] != "AWS::Pipes::Pipe":
            continue
        p = r["Properties"]
        source = p.get("SourceParameters") or {}
        stream = source.get("DynamoDBStreamParameters") or source.get("KinesisStreamParameters")
        if stream is None:
            continue
        queue = checker.target((stream.get("DeadLetterConfig") or {}).get("Arn"))
        if checker.resources.get(queue, {}).get("Type") != "AWS::SQS::Queue":
            checker.fail(name, "no SQS dead-letter destination (DeadLetterConfig.Arn): a record given up would vanish")
            continue
        watched = any(
            a["Type"] == "AWS::CloudWatch::Alarm"
            and any(checker.target(d.get("Value")) == queue for d in a["Properties"].get("Dimensions", []))
            for a in checker.resources.values()
        )
        if not watched:
            checker.fail(name, f"no alarm watches the dead-letter destination {queue}")
        role = checker.target(p.get("RoleArn"))
        if not checker.allows(role, "sqs:SendMessage", lambda res: checker.target(res) == queue):
            checker.fail(name, f"the pipe's role {role} may not send to its dead-letter destination {queue}")


def check_local_roles(checker, local):
    """The local stack's gateway roles (`swarm-local wiring --json`, `gateway_roles`) list the template's tools."""
    template = gateway_roles(checker) or {}
    wired = local.get("gateway_roles")
    if wired is None:
        checker.fail("wiring gateway", "the local wiring does not say its gateway roles' tool lists")
        return
    for name in sorted(set(template) | set(wired)):
        want = sorted(template.get(name, {}).get("tools", []))
        got = sorted((wired.get(name) or {}).get("tools", []))
        if want != got:
            checker.fail(f"wiring gateway role {name}", f"lists {got!r} locally, {want!r} in the template")
