#!/usr/bin/env python3
"""Both clients cover every operation of docs/openapi.yaml (docs/CLIENTS.md).

For each operationId of the document (read with PyYAML, not the clients' own line parsers):
the Python table (clients/python/src/ephemeral/_operations.py, imported) and the TypeScript table
(clients/typescript/src/operations.ts, read) both have it, with the document's method and path,
and have nothing else; each client's coverage test has a call for it (the call that test checks
sends the request); and every operation other than a HEAD is named by a method in the client's
source. Exit 1 with the list of what is missing.

Usage: client_coverage.py TOP
"""
import importlib.util
import os
import re
import sys

import yaml

METHODS = ("get", "put", "post", "delete", "patch", "head", "options", "trace")


def document(top):
    with open(os.path.join(top, "docs", "openapi.yaml"), encoding="utf-8") as f:
        doc = yaml.safe_load(f)
    ops = {}
    for path, item in (doc.get("paths") or {}).items():
        for method, op in item.items():
            if method in METHODS:
                ops[op["operationId"]] = (method.upper(), path)
    return ops


def python_table(top):
    path = os.path.join(top, "clients", "python", "src", "ephemeral", "_operations.py")
    spec = importlib.util.spec_from_file_location("_operations", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return dict(mod.OPERATIONS)


def typescript_table(top):
    with open(os.path.join(top, "clients", "typescript", "src", "operations.ts"), encoding="utf-8") as f:
        text = f.read()
    body = text[text.index("export const OPERATIONS = {"):]
    body = body[: body.index("} as const")]
    rows = re.findall(r'^\s*(\w+): \{ method: "([A-Z]+)", path: "([^"]+)" \},\s*$', body, re.M)
    entries = [line for line in body.splitlines()[1:] if line.strip()]
    if len(rows) != len(entries):
        raise SystemExit(f"client_coverage: {len(entries) - len(rows)} rows of operations.ts not understood")
    return {name: (method, path) for name, method, path in rows}


def read(top, *parts):
    with open(os.path.join(top, *parts), encoding="utf-8") as f:
        return f.read()


def main():
    top = sys.argv[1]
    ops = document(top)
    problems = []
    if len(ops) < 20:
        problems.append(f"only {len(ops)} operations read from the document")
    sources = {
        "python": (python_table(top), read(top, "clients/python/src/ephemeral/_client.py"),
                   read(top, "clients/python/tests/test_coverage.py")),
        "typescript": (typescript_table(top), read(top, "clients/typescript/src/index.ts"),
                       read(top, "clients/typescript/test/coverage.test.mjs")),
    }
    for client, (table, source, test) in sources.items():
        for op, where in sorted(ops.items()):
            if op not in table:
                problems.append(f"{client}: {op} ({where[0]} {where[1]}) is not in the client's table")
                continue
            if table[op] != where:
                problems.append(f"{client}: {op} is {table[op]} in the client, {where} in the document")
            if not re.search(r'^\s*"?' + op + r'"?: (lambda c|\(c\) =>)', test, re.M):
                problems.append(f"{client}: {op} has no call in the client's coverage test")
            if where[0] != "HEAD" and f'"{op}"' not in source:
                problems.append(f"{client}: no method of the client sends {op}")
        for op in sorted(set(table) - set(ops)):
            problems.append(f"{client}: {op} is in the client's table, not in the document")
    for p in problems:
        print(p)
    if problems:
        return 1
    print(f"client_coverage: {len(ops)} operations, each in both clients")
    return 0


if __name__ == "__main__":
    sys.exit(main())
