"""The client against a real ephemerald (tests/blackbox/client_python.sh starts it and sets
EPHEMERAL_URL, EPHEMERAL_API_KEY (a member key), EPHEMERAL_ADMIN_KEY and EPHEMERAL_SEED (the
seed example's request.json)); stand-in servers in front of it cut streams and answer 503."""

import http.server
import json
import os
import threading
import time
import unittest
import uuid
from typing import Any, Dict, List

import ephemeral
from standin import StandIn

ENV = ("EPHEMERAL_URL", "EPHEMERAL_API_KEY", "EPHEMERAL_ADMIN_KEY", "EPHEMERAL_SEED")


def setUpModule() -> None:
    missing = [name for name in ENV if not os.environ.get(name)]
    if missing:
        raise RuntimeError(f"run through tests/blackbox/client_python.sh: {', '.join(missing)} unset")


def seed() -> Dict[str, Any]:
    with open(os.environ["EPHEMERAL_SEED"], encoding="utf-8") as f:
        request: Dict[str, Any] = json.load(f)
    return request


def settled(run: Any) -> None:
    cost = run.cost
    assert cost.charged_micros + cost.released_micros == cost.reserved_micros, cost
    assert cost.model_micros + cost.web_micros + cost.compute_micros == cost.charged_micros, cost


class TestServer(unittest.TestCase):
    client: ephemeral.Client
    admin: ephemeral.Client

    @classmethod
    def setUpClass(cls) -> None:
        cls.client = ephemeral.Client()  # from EPHEMERAL_URL and EPHEMERAL_API_KEY
        cls.admin = ephemeral.Client(api_key=os.environ["EPHEMERAL_ADMIN_KEY"])

    def test_seed_end_to_end(self) -> None:
        run = self.client.runs.create(**seed(), wait=120)
        self.assertRegex(run.id, r"^run_[0-9a-f]{32}$")
        self.assertEqual(run.status, "completed", run.error)
        self.assertIn("2 3 5 7 11 13 17 19 23 29 31 37 41 43 47", run.result)
        self.assertEqual(run.prompt, seed()["prompt"])
        self.assertEqual(run.cost.reserved_micros, seed()["max_cost_micros"])
        settled(run)
        events = list(self.client.runs.events(run.id))
        self.assertEqual(events[-1].type, ephemeral.FINAL_EVENT)
        self.assertEqual(events[0].type, "run.queued")
        self.assertEqual([e.seq for e in events], list(range(1, len(events) + 1)))
        stored = list(self.client.runs.events(run.id, follow=False))
        self.assertEqual(events, stored, "the stream gives the stored events")
        self.assertEqual(sum(e.type == "shell.command" for e in events), 4)
        transcript = list(self.client.runs.transcript(run.id))
        self.assertEqual(transcript[0].kind, "run")
        self.assertEqual(sum(line.kind == "model_turn" for line in transcript), 3)
        # Cancelling a finished run answers it unchanged.
        self.assertEqual(self.client.runs.cancel(run.id).status, "completed")
        self.assertEqual(self.client.balance().reserved_micros, 0)

    def test_list_pages_and_metadata(self) -> None:
        tag = uuid.uuid4().hex
        created = []
        for i in range(5):
            run = self.client.runs.create(**seed(), metadata={"suite": tag, "i": str(i)})
            created.append(run.id)
        for run_id in created:
            self.client.runs.wait(run_id, timeout=120)
        # Five runs, two a page: three pages, newest first, none twice.
        listed = [r.id for r in self.client.runs.list(metadata={"suite": tag}, limit=2)]
        self.assertEqual(listed, list(reversed(created)))
        one = [r.id for r in self.client.runs.list(metadata={"suite": tag, "i": "3"})]
        self.assertEqual(one, [created[3]])
        self.assertEqual(list(self.client.runs.list(metadata={"suite": "no-such-" + tag})), [])
        everything = [r.id for r in self.client.runs.list(limit=1)]
        self.assertTrue(set(created) <= set(everything))
        self.assertEqual(len(everything), len(set(everything)))
        done = [r.id for r in self.client.runs.list(status="completed", metadata={"suite": tag})]
        self.assertEqual(done, list(reversed(created)))

    def test_sandbox_driven(self) -> None:
        sbx = self.client.sandboxes
        key = "py-sbx-" + uuid.uuid4().hex
        box = sbx.create(max_cost_micros=200000, metadata={"suite": key}, idempotency_key=key, wait=120)
        self.assertRegex(box.id, r"^sbx_[0-9a-f]{32}$")
        self.assertEqual(box.status, "ready")
        again = sbx.create(max_cost_micros=200000, metadata={"suite": key}, idempotency_key=key)
        self.assertEqual(again.id, box.id, "an idempotent create makes one sandbox")
        self.assertEqual([b.id for b in sbx.list(metadata={"suite": key}, limit=1)], [box.id])
        self.assertEqual(sbx.get(box.id).status, "ready")
        written = sbx.upload(box.id, "in/data.txt", b"a\x00b\n")
        self.assertEqual((written.path, written.size), ("in/data.txt", 4))
        self.assertEqual(sbx.download(box.id, "in/data.txt"), b"a\x00b\n")
        self.assertEqual([(f.path, f.type, f.size) for f in sbx.files(box.id, "in")],
                         [("in/data.txt", "file", 4)])
        done = sbx.exec(box.id, "wc -c < in/data.txt; echo err >&2; exit 3", wait=60)
        self.assertEqual((done.status, done.exit_code, done.stdout.strip(), done.stderr),
                         ("exited", 3, "4", "err\n"))
        events = list(sbx.stream(box.id, "echo one; echo two >&2"))
        self.assertEqual(events[-1].type, "exit")
        self.assertEqual(events[-1].exit_code, 0)
        out = "".join(e.text for e in events if e.type == "stdout")
        self.assertEqual(out, "one\n")
        self.assertEqual("".join(e.text for e in events if e.type == "stderr"), "two\n")
        bg = sbx.background(box.id, "echo started; sleep 600")
        self.assertEqual((bg.status, bg.background), ("running", True))
        self.assertEqual(sbx.command(box.id, bg.id).status, "running")
        with self.assertRaises(ephemeral.NotBackgroundError):
            sbx.kill(box.id, done.id)
        self.assertEqual(sbx.kill(box.id, bg.id).status, "killed")
        tail = list(sbx.follow(box.id, bg.id))
        self.assertEqual(tail[-1].type, "exit")
        self.assertEqual(tail[-1].status, "killed")
        with self.assertRaises(ephemeral.NotFoundError) as nf:
            sbx.download(box.id, "no/such")
        self.assertEqual(nf.exception.code, "file_not_found")
        with self.assertRaises(ephemeral.BadRequestError):
            sbx.upload(box.id, "../escape", b"x")
        ended = sbx.delete(box.id)
        self.assertEqual(ended.status, "stopped")
        self.assertEqual(ended.cost.charged_micros + ended.cost.released_micros, ended.cost.reserved_micros)
        with self.assertRaises(ephemeral.SandboxEndedError):
            sbx.exec(box.id, "true")
        timeline = [e.type for e in sbx.events(box.id)]
        self.assertEqual(timeline[0], "sandbox.created")
        self.assertEqual(timeline[-1], ephemeral.FINAL_EVENT)
        self.assertEqual(timeline, [e.type for e in sbx.events(box.id, follow=False)])
        with self.assertRaises(ephemeral.NotFoundError):
            sbx.get("sbx_" + "0" * 32)

    def test_webhook_delivery_verified(self) -> None:
        """A receiver on loopback: the ended run's delivery arrives signed, verify_signature
        accepts it with the endpoint's secret, a first answer of 500 is retried with the same
        event id, and the delivery's history shows both attempts."""
        got: List[Dict[str, Any]] = []
        arrived = threading.Condition()
        want: Dict[str, str] = {}

        class Receiver(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (the library's name)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                event = json.loads(body)
                mine = event["data"].get("id") == want.get("run")
                with arrived:
                    if mine:
                        got.append({"body": body, "event": event,
                                    "signature": self.headers.get("Ephemeral-Signature")})
                    first = mine and len(got) == 1
                    arrived.notify_all()
                self.send_response(500 if first else 200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        hook = self.admin.webhooks.create(f"http://127.0.0.1:{server.server_address[1]}/hook",
                                          events=["run.completed"])
        try:
            with arrived:
                run = self.client.runs.create(**seed())
                want["run"] = run.id
            with arrived:
                self.assertTrue(arrived.wait_for(lambda: len(got) >= 2, timeout=120), got)
            for delivery in got[:2]:
                ephemeral.verify_signature(delivery["body"], delivery["signature"], hook.secret)
                with self.assertRaises(ephemeral.SignatureVerificationError):
                    ephemeral.verify_signature(delivery["body"], delivery["signature"],
                                               hook.secret + "x")
            first, second = got[0]["event"], got[1]["event"]
            self.assertEqual(first["id"], second["id"], "a retry keeps the event id")
            self.assertEqual((first["type"], first["data"]["status"]),
                             ("run.completed", "completed"))
            # The second attempt is recorded once its answer is read: wait for the record.
            deadline = time.monotonic() + 60
            detail = self.admin.webhooks.delivery(hook.id, first["id"])
            while detail.status != "delivered" and time.monotonic() < deadline:
                time.sleep(0.05)
                detail = self.admin.webhooks.delivery(hook.id, first["id"])
            attempts = [(a.outcome, a.http_status) for a in detail.history]
            self.assertEqual(attempts[:2], [("retried", 500), ("delivered", 200)], detail)
        finally:
            self.admin.webhooks.delete(hook.id)
            server.shutdown()
            server.server_close()

    def test_not_found_is_a_typed_error(self) -> None:
        missing = "run_" + "0" * 32
        with self.assertRaises(ephemeral.NotFoundError) as ctx:
            self.client.runs.get(missing)
        err = ctx.exception
        self.assertIsInstance(err, ephemeral.APIError)
        self.assertEqual(err.status, 404)
        self.assertEqual(err.type, "not_found_error")
        self.assertEqual(err.code, "run_not_found")
        self.assertIsNone(err.param)
        self.assertRegex(err.request_id or "", r"^req_[0-9a-f]{16}$")
        self.assertIn(missing, err.message)

    def test_bad_request_names_the_param(self) -> None:
        with self.assertRaises(ephemeral.BadRequestError) as ctx:
            self.client.runs.create(**dict(seed(), timeout_seconds=0))
        self.assertEqual(ctx.exception.param, "timeout_seconds")
        self.assertEqual(ctx.exception.type, "invalid_request_error")
        with self.assertRaises(ephemeral.BadRequestError) as ctx:
            self.client.runs.create(**dict(seed(), sheel=True))
        self.assertEqual(ctx.exception.param, "sheel")

    def test_unauthorized(self) -> None:
        bad = ephemeral.Client(api_key="eph_" + "x" * 40)
        with self.assertRaises(ephemeral.AuthenticationError) as ctx:
            bad.balance()
        self.assertEqual(ctx.exception.status, 401)
        self.assertEqual(ctx.exception.type, "authentication_error")
        self.assertNotIn("x" * 40, str(ctx.exception))
        with self.assertRaises(ephemeral.PermissionDeniedError) as ctx2:
            self.client.keys.list()
        self.assertEqual(ctx2.exception.status, 403)

    def test_idempotent_create(self) -> None:
        key = str(uuid.uuid4())
        first = self.client.runs.create(**seed(), idempotency_key=key)
        again = self.client.runs.create(**seed(), idempotency_key=key)
        self.assertEqual(first.id, again.id)
        with self.assertRaises(ephemeral.UnprocessableEntityError) as ctx:
            self.client.runs.create(**dict(seed(), max_cost_micros=50000), idempotency_key=key)
        self.assertEqual(ctx.exception.type, "idempotency_error")
        self.client.runs.wait(first.id, timeout=120)
        other = self.client.runs.create(**seed(), wait=120)
        self.assertNotEqual(other.id, first.id, "without a key given, a new one each time")

    def test_models_and_balance(self) -> None:
        models = self.client.models.list()
        self.assertTrue(models)
        self.assertEqual(sum(m.default for m in models), 1)
        for m in models:
            self.assertEqual(m.object, "model")
            self.assertIsInstance(m.prices.input_micros_per_mtok, int)
        balance = self.client.balance()
        self.assertEqual(balance.object, "balance")
        self.assertEqual(balance.available_micros, balance.balance_micros - balance.reserved_micros)

    def test_head_operations(self) -> None:
        run = self.client.runs.create(**seed(), wait=120)
        self.assertTrue(self.client.runs.exists(run.id))
        self.assertFalse(self.client.runs.exists("run_" + "0" * 32))
        head = self.client.head("getBalanceHead")
        self.assertEqual(head.status, 200)
        self.assertIn("application/json", head.headers["content-type"])
        self.assertRegex(head.headers["request-id"], r"^req_[0-9a-f]{16}$")
        self.assertEqual(self.client.head("healthHead").status, 200)  # no key needed
        self.assertEqual(self.client.head("listRunEventsHead", path={"id": run.id}).status, 200)
        with self.assertRaises(ephemeral.NotFoundError) as ctx:
            self.client.head("getRunTranscriptHead", path={"id": "run_" + "0" * 32})
        self.assertEqual(ctx.exception.status, 404)
        with self.assertRaises(ephemeral.AuthenticationError):
            ephemeral.Client(api_key="eph_" + "y" * 40).head("listRunsHead")
        with self.assertRaises(ValueError):
            self.client.head("createRun")
        with self.assertRaises(ValueError):
            self.client.head("noSuchOperation")

    def test_admin_keys_connections_credits(self) -> None:
        before = self.admin.balance().balance_micros
        key = str(uuid.uuid4())
        after = self.admin.credits.add(1000, idempotency_key=key)
        self.assertEqual(after.balance_micros, before + 1000)
        self.admin.credits.add(1000, idempotency_key=key)  # a retry: credited once
        self.assertEqual(self.admin.balance().balance_micros, before + 1000)
        made = self.admin.keys.create(role="member")
        self.assertTrue(made.key.startswith("eph_"))
        self.assertIn(made.id, [k.id for k in self.admin.keys.list()])
        self.assertEqual(ephemeral.Client(api_key=made.key).balance().object, "balance")
        self.admin.keys.revoke(made.id)
        with self.assertRaises(ephemeral.AuthenticationError):
            ephemeral.Client(api_key=made.key).balance()
        name = "c" + uuid.uuid4().hex[:8]
        conn = self.admin.connections.create(name, "https://api.example.com",
                                             headers={"Authorization": "Bearer secret-value"})
        self.assertEqual(conn.header_names, ["Authorization"])
        self.assertNotIn("secret-value", json.dumps(self.admin.connections.get(name)))
        self.assertIn(name, [c.name for c in self.admin.connections.list()])
        self.assertTrue(self.admin.connections.delete(name).deleted)
        with self.assertRaises(ephemeral.NotFoundError):
            self.admin.connections.get(name)
        self.assertEqual(self.client.health().status, "ok")
        self.assertIn("ephemeral_store_up", self.client.metrics())


class TestStandIns(unittest.TestCase):
    """The real server behind stand-ins that misbehave in one precise way."""

    upstream = ""

    @classmethod
    def setUpClass(cls) -> None:
        cls.upstream = os.environ["EPHEMERAL_URL"]

    def test_503_retried_after_retry_after(self) -> None:
        def answer(handler: Any, req: Any) -> None:
            if len(server.requests) == 1:
                handler.reply(503, b'{"error":{"type":"api_error","code":"shutting_down","message":"shutting down"}}',
                              {"Retry-After": "1"})
            else:
                handler.proxy(req, self.upstream)

        with StandIn(answer) as server:
            client = ephemeral.Client(server.url)
            waits: List[float] = []
            client._sleep = waits.append
            run = client.runs.create(**seed(), wait=120)
            self.assertEqual(run.status, "completed")
            self.assertEqual(waits, [1.0], "slept what Retry-After said")
            self.assertEqual(len(server.requests), 2)
            keys = [r.headers.get("idempotency-key") for r in server.requests]
            self.assertTrue(keys[0])
            self.assertEqual(keys[0], keys[1], "the retry sends the same idempotency key")

    def test_retry_after_is_bounded_and_retries_end(self) -> None:
        def answer(handler: Any, req: Any) -> None:
            handler.reply(429, b'{"error":{"type":"rate_limit_error","code":"too_many_queued_runs","message":"slow down"}}',
                          {"Retry-After": "3600"})

        with StandIn(answer) as server:
            client = ephemeral.Client(server.url, max_retries=2, max_retry_wait=5)
            waits: List[float] = []
            client._sleep = waits.append
            with self.assertRaises(ephemeral.RateLimitError) as ctx:
                client.runs.create(**seed())
            self.assertEqual(ctx.exception.code, "too_many_queued_runs")
            self.assertEqual(waits, [5.0, 5.0])
            self.assertEqual(len(server.requests), 3)

    def test_connection_error_retried_only_when_safe(self) -> None:
        def answer(handler: Any, req: Any) -> None:
            if len(server.requests) == 1:
                handler.close_connection = True
                handler.connection.shutdown(2)  # no answer at all
            else:
                handler.proxy(req, self.upstream)

        with StandIn(answer) as server:
            client = ephemeral.Client(server.url)
            client._sleep = lambda s: None
            self.assertEqual(client.balance().object, "balance")  # a GET: retried
            self.assertEqual(len(server.requests), 2)
        with StandIn(answer) as server:
            admin = ephemeral.Client(server.url, os.environ["EPHEMERAL_ADMIN_KEY"])
            admin._sleep = lambda s: None
            with self.assertRaises(ephemeral.APIConnectionError):
                admin.keys.create()  # a POST without an idempotency key: not sent twice
            self.assertEqual(len(server.requests), 1)
            self.assertIs(ephemeral.ConnectionError, ephemeral.APIConnectionError)

    def test_timeout(self) -> None:
        release = threading.Event()

        def answer(handler: Any, req: Any) -> None:
            release.wait(30)  # no answer while the test runs

        with StandIn(answer) as server:
            try:
                client = ephemeral.Client(server.url, timeout=0.5, max_retries=1)
                client._sleep = lambda s: None
                with self.assertRaises(ephemeral.APITimeoutError):
                    client.balance()  # a GET: timed out, retried once, timed out
                self.assertEqual(len(server.requests), 2)
                self.assertIsInstance(ephemeral.APITimeoutError("x"), ephemeral.APIConnectionError)
            finally:
                release.set()

    def test_events_resume_after_a_dropped_stream(self) -> None:
        run = ephemeral.Client().runs.create(**seed(), wait=120)
        stored = list(ephemeral.Client().runs.events(run.id, follow=False))
        self.assertGreater(len(stored), 5)

        def cut_inside_the_fourth(sent: bytes) -> bool:
            # After the 4th message's id and event lines, before its data: cut in mid-message.
            return sent.count(b"\nid: ") + sent.startswith(b"id: ") == 4 and sent.endswith(b"\n") \
                and sent.rsplit(b"\n", 2)[-2].startswith(b"event: ")

        def answer(handler: Any, req: Any) -> None:
            first = len(server.requests) == 1
            handler.proxy(req, self.upstream, cut_after=cut_inside_the_fourth if first else None)

        with StandIn(answer) as server:
            events = list(ephemeral.Client(server.url).runs.events(run.id))
            self.assertEqual(len(server.requests), 2, "one resume")
            self.assertNotIn("last-event-id", server.requests[0].headers)
            self.assertEqual(server.requests[1].headers.get("last-event-id"), "3")
        self.assertEqual(events, stored, "every event once, in order, to worker.destroyed")

    def test_events_give_up_without_progress(self) -> None:
        run = ephemeral.Client().runs.create(**seed(), wait=120)

        def answer(handler: Any, req: Any) -> None:
            # Every stream ends after its first message: progress each time, then the end. A
            # client that does not resume where it was would go round for ever: a bound.
            if len(server.requests) > 100:
                handler.reply(500, b'{"error":{"type":"api_error","message":"too many resumes"}}')
                return
            handler.proxy(req, self.upstream, cut_after=lambda sent: sent.endswith(b"\n\n"))

        with StandIn(answer) as server:
            events = list(ephemeral.Client(server.url).runs.events(run.id))
        self.assertEqual(events[-1].type, ephemeral.FINAL_EVENT)
        self.assertEqual(len(server.requests), len(events))

        def dead(handler: Any, req: Any) -> None:
            handler.reply(200, b": keep-alive\n\n", content_type="text/event-stream") \
                if req.route.endswith("/events") else handler.proxy(req, self.upstream)

        running = ephemeral.EphemeralObject(status="running")
        with StandIn(dead) as server:
            client = ephemeral.Client(server.url, max_retries=2)
            client._sleep = lambda s: None
            client.runs.get = lambda *a, **k: running  # type: ignore[method-assign,assignment]
            with self.assertRaises(ephemeral.APIConnectionError):
                list(client.runs.events(run.id))
            self.assertEqual(len(server.requests), 3, "the first try and two resumes")


if __name__ == "__main__":
    unittest.main()
