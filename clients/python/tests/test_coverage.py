"""Every endpoint of docs/openapi.yaml is covered by the client: the client's table of
operations (ephemeral.OPERATIONS) is the document's, method and path, and each client method
sends the request of its row (checked against a stand-in server that records them).

Runs without a server. The document is found from this file (clients/python/tests/ in the
repository), or at $EPHEMERAL_OPENAPI.
"""

import os
import re
import unittest
from typing import Dict, Tuple

import ephemeral
from standin import StandIn, routes

HERE = os.path.dirname(os.path.abspath(__file__))
OPENAPI = os.environ.get("EPHEMERAL_OPENAPI") or os.path.join(HERE, "..", "..", "..", "docs", "openapi.yaml")
METHODS = ("get", "put", "post", "delete", "patch", "head", "options", "trace")


def document_operations(path: str) -> Dict[str, Tuple[str, str]]:
    """operationId -> (METHOD, path) from the document's `paths:` (its layout: a path two spaces
    in, a method four, its operationId six), without a YAML library: the client's tests need
    nothing outside the standard library."""
    ops: Dict[str, Tuple[str, str]] = {}
    in_paths = False
    current_path = current_method = None
    with open(path, encoding="utf-8") as f:
        for line in f:
            if re.match(r"^\S", line):
                in_paths = line.startswith("paths:")
                continue
            if not in_paths:
                continue
            m = re.match(r"^  (/\S*):\s*$", line)
            if m:
                current_path, current_method = m.group(1), None
                continue
            m = re.match(r"^    (\w+):", line)
            if m:
                current_method = m.group(1) if m.group(1) in METHODS else None
                continue
            m = re.match(r"^      operationId:\s*(\S+)\s*$", line)
            if m and current_path and current_method:
                if m.group(1) in ops:
                    raise AssertionError(f"operationId {m.group(1)} twice in the document")
                ops[m.group(1)] = (current_method.upper(), current_path)
    return ops


def template_matches(template: str, path: str) -> bool:
    # a sandbox file's {path} keeps its slashes; every other parameter is one segment
    pattern = "^" + re.escape(template).replace(r"\{path\}", ".+") + "$"
    pattern = re.sub(r"\\\{[^}]+\\\}", "[^/]+", pattern)
    return re.match(pattern, path) is not None


class TestCoverage(unittest.TestCase):
    def test_document_parsed(self) -> None:
        ops = document_operations(OPENAPI)
        # The parser itself: the document's first operations, as written there.
        self.assertEqual(ops["createRun"], ("POST", "/v1/runs"))
        self.assertEqual(ops["revokeKey"], ("DELETE", "/v1/keys/{id}"))
        self.assertEqual(ops["getRunHead"], ("HEAD", "/v1/runs/{id}"))
        with open(OPENAPI, encoding="utf-8") as f:
            self.assertEqual(len(ops), f.read().count("operationId:"))

    def test_every_operation_in_the_table(self) -> None:
        ops = document_operations(OPENAPI)
        missing = sorted(set(ops) - set(ephemeral.OPERATIONS))
        extra = sorted(set(ephemeral.OPERATIONS) - set(ops))
        self.assertEqual(missing, [], "operations of docs/openapi.yaml the client lacks")
        self.assertEqual(extra, [], "operations of the client not in docs/openapi.yaml")
        for op, where in ops.items():
            self.assertEqual(ephemeral.OPERATIONS[op], where, f"{op}: method and path")

    def test_each_method_sends_its_operation(self) -> None:
        def answer(handler, req) -> None:  # type: ignore[no-untyped-def]
            sse = "text/event-stream" in req.headers.get("accept", "")
            if sse and (req.route.endswith("/commands") or "/commands/" in req.route):
                handler.reply(200, b'event: exit\ndata: {"id":"cmd_1","status":"exited"}\n\n',
                              content_type="text/event-stream")
            elif "/files/" in req.route and req.method == "GET":
                handler.reply(200, b"bytes", content_type="application/octet-stream")
            elif req.route.endswith("/events") and sse:
                handler.reply(200, b'id: 1\nevent: worker.destroyed\ndata: {"seq":1,"type":"worker.destroyed"}\n\n',
                              content_type="text/event-stream")
            elif req.route.endswith("/transcript"):
                handler.reply(200, b'{"kind":"run"}\n', content_type="application/x-ndjson")
            elif req.route.endswith("/log"):
                handler.reply(200, b"building\n", content_type="text/plain")
            elif req.route == "/metrics":
                handler.reply(200, b"ephemeral_store_up 1\n", content_type="text/plain")
            else:
                handler.reply(200, b'{"object":"list","data":[],"has_more":false,"id":"x","status":"completed"}')

        rid = "run_" + "0" * 32
        sid = "sbx_" + "0" * 32
        calls = {
            "createSandbox": lambda c: c.sandboxes.create(max_cost_micros=1),
            "listSandboxes": lambda c: list(c.sandboxes.list()),
            "getSandbox": lambda c: c.sandboxes.get(sid),
            "deleteSandbox": lambda c: c.sandboxes.delete(sid),
            "listSandboxEvents": lambda c: list(c.sandboxes.events(sid)),
            "runSandboxCommand": lambda c: c.sandboxes.exec(sid, "true"),
            "getSandboxCommand": lambda c: c.sandboxes.command(sid, "cmd_1"),
            "streamSandboxCommand": lambda c: list(c.sandboxes.follow(sid, "cmd_1")),
            "killSandboxCommand": lambda c: c.sandboxes.kill(sid, "cmd_1"),
            "listSandboxFiles": lambda c: c.sandboxes.files(sid),
            "writeSandboxFile": lambda c: c.sandboxes.upload(sid, "d/a.txt", b"x"),
            "readSandboxFile": lambda c: c.sandboxes.download(sid, "d/a.txt"),
            "createRun": lambda c: c.runs.create(prompt="p", max_cost_micros=1),
            "listRuns": lambda c: list(c.runs.list()),
            "getRun": lambda c: c.runs.get(rid),
            "listRunEvents": lambda c: list(c.runs.events(rid)),
            "getRunTranscript": lambda c: list(c.runs.transcript(rid)),
            "cancelRun": lambda c: c.runs.cancel(rid),
            "getBalance": lambda c: c.balance(),
            "listModels": lambda c: c.models.list(),
            "addCredit": lambda c: c.credits.add(5),
            "createKey": lambda c: c.keys.create(),
            "listKeys": lambda c: c.keys.list(),
            "revokeKey": lambda c: c.keys.revoke("key_" + "0" * 24),
            "createConnection": lambda c: c.connections.create("n", "https://api.example.com"),
            "listConnections": lambda c: c.connections.list(),
            "getConnection": lambda c: c.connections.get("n"),
            "deleteConnection": lambda c: c.connections.delete("n"),
            "createImage": lambda c: c.images.create("tools", packages=["jq"]),
            "listImages": lambda c: c.images.list(),
            "getImage": lambda c: c.images.get("tools"),
            "deleteImage": lambda c: c.images.delete("tools"),
            "getImageLog": lambda c: list(c.images.log("tools")),
            "createWebhook": lambda c: c.webhooks.create("https://hooks.example.com/x"),
            "listWebhooks": lambda c: c.webhooks.list(),
            "getWebhook": lambda c: c.webhooks.get("wh_1"),
            "deleteWebhook": lambda c: c.webhooks.delete("wh_1"),
            "listWebhookDeliveries": lambda c: c.webhooks.deliveries("wh_1", limit=5),
            "getWebhookDelivery": lambda c: c.webhooks.delivery("wh_1", "evt_1"),
            "health": lambda c: c.health(),
            "metrics": lambda c: c.metrics(),
            "listRunsHead": lambda c: c.head("listRunsHead"),
            "getRunHead": lambda c: c.runs.exists(rid),
            "listRunEventsHead": lambda c: c.head("listRunEventsHead", path={"id": rid}),
            "getRunTranscriptHead": lambda c: c.head("getRunTranscriptHead", path={"id": rid}),
            "getBalanceHead": lambda c: c.head("getBalanceHead"),
            "listModelsHead": lambda c: c.head("listModelsHead"),
            "listKeysHead": lambda c: c.head("listKeysHead"),
            "listConnectionsHead": lambda c: c.head("listConnectionsHead"),
            "getConnectionHead": lambda c: c.head("getConnectionHead", path={"name": "n"}),
            "listImagesHead": lambda c: c.head("listImagesHead"),
            "getImageHead": lambda c: c.head("getImageHead", path={"name": "tools"}),
            "getImageLogHead": lambda c: c.head("getImageLogHead", path={"name": "tools"}),
            "listWebhooksHead": lambda c: c.head("listWebhooksHead"),
            "getWebhookHead": lambda c: c.head("getWebhookHead", path={"id": "wh_1"}),
            "listWebhookDeliveriesHead": lambda c: c.head(
                "listWebhookDeliveriesHead", path={"id": "wh_1"}
            ),
            "getWebhookDeliveryHead": lambda c: c.head(
                "getWebhookDeliveryHead", path={"id": "wh_1", "event_id": "evt_1"}
            ),
            "healthHead": lambda c: c.head("healthHead"),
            "metricsHead": lambda c: c.head("metricsHead"),
        }
        self.assertEqual(sorted(calls), sorted(ephemeral.OPERATIONS), "a call for each operation")
        with StandIn(answer) as server:
            client = ephemeral.Client(server.url, "eph_test", max_retries=0)
            for op, call in calls.items():
                with server.lock:
                    server.requests.clear()
                call(client)
                method, template = ephemeral.OPERATIONS[op]
                sent = routes(server)
                self.assertTrue(sent, f"{op}: no request")
                self.assertEqual(sent[0][0], method, f"{op}: method")
                self.assertTrue(template_matches(template, sent[0][1]), f"{op}: {sent[0][1]} is not {template}")


if __name__ == "__main__":
    unittest.main()
