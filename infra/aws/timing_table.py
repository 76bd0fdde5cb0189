#!/usr/bin/env python3
# The timing table (shared/core/timings.toml) as the template lint reads it: its values by dotted key, where each
# stands in the template, and the rules between them with the small expression language they are written in.
# Usage: imported by check_template.py (Checker.check_timings) and its tests; no command line of its own.
import ast
import os
import tomllib

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
