#!/bin/bash
# The client against a fake API (below) that fails the way networks do: an event
# stream dropped mid-event and resumed with Last-Event-ID without printing anything twice; a server
# without the stream (JSON polling); a POST lost on the way, retried once with the same
# idempotency key; an answer over the 16 MiB cap; a wrong key; the text of get, list, balance and
# cancel.
. "$(dirname "$0")/lib.sh"
export NO_COLOR=1
export EPHEMERAL_API_KEY="eph_$(printf 'k%.0s' $(seq 40))"
RUN=run_de9af30ebaaa50ab76819bb536239c61

# The fake server, written out so that this test is one file.
cat >"$TEST_TMP/fake_server.py" <<'PY'
#!/usr/bin/env python3
"""A fake Ephemeral API for the client's black-box tests: the real wire protocol (JSON, SSE), with
the failures a real network has on demand, so the client's resume, fallback and limits are tested.

    fake_server.py PORT_FILE LOG_FILE MODE

MODE is one of:
  sse       the events as a stream that drops after the fifth event, then resumes (Last-Event-ID)
  json      no event stream: the JSON list, a few more events each poll (?after=SEQ)
  dropPOST  the first POST /v1/runs closes the connection without an answer; the retry succeeds
  big       GET /v1/balance answers with a 17 MiB body
The port it listens on is written to PORT_FILE; every request line and the headers the tests check
(Idempotency-Key, Last-Event-ID, Authorization present or not) are appended to LOG_FILE.
"""
import json
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT_FILE, LOG_FILE, MODE = sys.argv[1], sys.argv[2], sys.argv[3]
KEY = "eph_" + "k" * 40
RUN_ID = "run_de9af30ebaaa50ab76819bb536239c61"
lock = threading.Lock()
state = {"posts": 0, "polls": 0}

EVENTS = [
    ("queue", "run.queued", 0.00, "budget of $0.04 reserved"),
    ("sandbox", "sandbox.ready", 2.42, "microVM ready"),
    ("worker", "worker.started", 2.47, "worker started · shell on · web off"),
    ("shell", "shell.command", 5.25, "$ pwd; whoami"),
    ("shell", "shell.command", 5.25, "$ command -v curl && curl -sS -m 8 https://example.com"),
    ("shell", "shell.command", 10.33, "$ printf '%s\\n' '#!/usr/bin/env python3' 'primes = []' …"),
    ("shell", "shell.command", 10.33, "$ printf 'sandbox proof\\n' > /tmp/proof.txt && ls -l /tmp/proof.txt"),
    ("sandbox", "sandbox.destroyed", 15.83, "microVM destroyed"),
    ("run", "run.completed", 15.84, "3 model calls, 5,214 tokens"),
    ("worker", "worker.destroyed", 16.24, "$0.00353 charged, $0.03647 released"),
]


def event(seq):
    source, typ, t, msg = EVENTS[seq - 1]
    return {"seq": seq, "t": t, "at": "2026-10-07T15:01:48.120Z", "source": source, "type": typ,
            "message": msg, "data": {}}


RUN = {
    "id": RUN_ID, "object": "run", "status": "completed", "model": "openai/gpt-6-luna",
    "created_at": "2026-10-07T15:01:48.120Z", "started_at": "2026-10-07T15:01:50.540Z",
    "finished_at": "2026-10-07T15:02:04.360Z",
    "permissions": {"shell": True, "web": False, "connections": [], "files": [],
                    "zero_data_retention": False, "timeout_seconds": 120, "max_cost_micros": 40000},
    "sandbox": {"backend": "microvm", "vcpus": 1, "memory_mib": 512},
    "result": "1. Prime script output: 2 3 5 7 11 13 17 19 23 29 31 37 41 43 47\n"
              "The network call did not succeed.",
    "error": None,
    "usage": {"model_calls": 3, "model_attempts": 5, "input_tokens": 4811, "output_tokens": 403, "total_tokens": 5214,
              "shell_commands": 4, "web_requests": 0, "connection_requests": 0},
    "cost": {"reserved_micros": 40000, "model_micros": 330, "web_micros": 0, "compute_micros": 3200,
             "charged_micros": 3530, "released_micros": 36470},
    "retention": {"log_kept_days": 30, "expires_at": "2026-11-06T15:02:04.360Z"},
    "metadata": {},
}


def log(line):
    with lock, open(LOG_FILE, "a") as f:
        f.write(line + "\n")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send_json(self, code, obj, extra=None):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def authorized(self):
        log("%s %s auth=%s" % (self.command, self.path,
                               "ok" if self.headers.get("Authorization") == "Bearer " + KEY else "bad"))
        if self.headers.get("Authorization") != "Bearer " + KEY:
            self.send_json(401, {"error": {"type": "authentication_error", "code": "invalid_api_key",
                                           "message": "missing or unknown api key"}})
            return False
        return True

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n)
        if not self.authorized():
            return
        if self.path == "/v1/runs":
            log("idempotency-key=%s" % self.headers.get("Idempotency-Key"))
            log("body=%s" % body.decode())
            with lock:
                state["posts"] += 1
                first = state["posts"] == 1
            if MODE == "dropPOST" and first:
                self.connection.shutdown(socket.SHUT_RDWR)
                self.close_connection = True
                return
            req = json.loads(body)
            if not isinstance(req.get("max_cost_micros"), int):
                self.send_json(400, {"error": {"type": "invalid_request_error", "code": "invalid",
                                               "message": "max_cost_micros must be an integer",
                                               "param": "max_cost_micros"}})
                return
            run = dict(RUN, status="queued")
            self.send_json(201, run)
        elif self.path == "/v1/runs/%s/cancel" % RUN_ID:
            self.send_json(200, dict(RUN, status="cancelled"))
        else:
            self.send_json(404, {"error": {"type": "not_found_error", "code": "not_found",
                                           "message": "no such run"}})

    def do_GET(self):
        if not self.authorized():
            return
        path, _, query = self.path.partition("?")
        if path == "/v1/balance":
            if MODE == "big":
                blob = b'{"object":"balance","pad":"' + b"x" * (17 << 20) + b'"}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(blob)))
                self.end_headers()
                try:
                    self.wfile.write(blob)
                except OSError:
                    pass
                return
            self.send_json(200, {"object": "balance", "balance_micros": 99960000,
                                 "reserved_micros": 40000, "available_micros": 99920000})
        elif path == "/v1/runs":
            log("list query=%s" % query)
            self.send_json(200, {"object": "list", "data": [RUN, dict(RUN, id="run_" + "0" * 32,
                                 status="running", finished_at=None, cost=None)], "has_more": False})
        elif path == "/v1/runs/%s" % RUN_ID:
            log("prefer=%s" % self.headers.get("Prefer"))
            self.send_json(200, RUN)
        elif path == "/v1/runs/%s/events" % RUN_ID:
            if MODE == "sse" and "text/event-stream" in (self.headers.get("Accept") or ""):
                self.stream()
            else:
                self.poll(query)
        else:
            self.send_json(404, {"error": {"type": "not_found_error", "code": "not_found",
                                           "message": "no such run"}})

    def stream(self):
        last = self.headers.get("Last-Event-ID")
        log("sse last-event-id=%s" % last)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()  # no length: the stream ends when the connection closes
        self.close_connection = True
        start = int(last) + 1 if last else 1
        if last:
            start -= 1  # repeat one event: the client must not print it twice
        for seq in range(start, len(EVENTS) + 1):
            if not last and seq == 6:
                # A drop in the middle of an event, before the final one.
                self.wfile.write(b"id: 6\nevent: shell.command\ndata: {\"seq\":6,")
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            chunk = ("id: %d\r\nevent: %s\r\ndata: %s\r\n\r\n: keep-alive\r\n\r\n"
                     % (seq, EVENTS[seq - 1][1], json.dumps(event(seq)))).encode()
            # Split every event in two writes, so lines arrive cut.
            self.wfile.write(chunk[:len(chunk) // 2])
            self.wfile.flush()
            time.sleep(0.01)
            self.wfile.write(chunk[len(chunk) // 2:])
            self.wfile.flush()

    def poll(self, query):
        after = 0
        for part in query.split("&"):
            if part.startswith("after="):
                after = int(part[6:])
        log("poll after=%d" % after)
        upto = min(after + 4, len(EVENTS))
        data = [event(s) for s in range(after + 1, upto + 1)]
        self.send_json(200, {"object": "list", "data": data, "has_more": False})


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
with open(PORT_FILE + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
import os
os.rename(PORT_FILE + ".tmp", PORT_FILE)
server.serve_forever()
PY

fake() { # MODE: starts the fake server, sets EPHEMERAL_URL and LOG
    LOG=$TEST_TMP/fake-$1.log
    local pf=$TEST_TMP/fake-$1.port
    python3 "$TEST_TMP/fake_server.py" "$pf" "$LOG" "$1" 2>>"$TEST_TMP/fake.err" &
    _pids+=($!)
    for _ in $(seq 100); do [ -s "$pf" ] && break; sleep 0.05; done
    [ -s "$pf" ] || fail "fake server did not start: $(cat "$TEST_TMP/fake.err")"
    export EPHEMERAL_URL="http://127.0.0.1:$(cat "$pf")"
}

expected_labels="Queued MicroVM MicroVM Shell Shell Shell Shell MicroVM Completed Worker destroyed "
labels() {
    awk '/^ *[0-9]+\.[0-9][0-9]  / { match($0, /^ *[0-9]+\.[0-9][0-9]  /); l = substr($0, RLENGTH + 1, 16); sub(/ +$/, "", l); printf "%s ", l }'
}

# 1. The stream drops after event 5, in the middle of event 6.
fake sse
out=$("$EPH" run --prompt "hi" --budget 0.04); rc=$?
printf '%s\n' "$out"
assert_eq "$rc" 0 "exit after a resumed stream"
assert_eq "$(printf '%s\n' "$out" | labels)" "$expected_labels" "resumed timeline, each event once"
assert_contains "$(cat "$LOG")" "sse last-event-id=None" "first connection"
assert_contains "$(cat "$LOG")" "sse last-event-id=5" "resumed from the last event printed"
assert_contains "$(cat "$LOG")" "prefer=wait=60" "final run fetched with Prefer: wait"
assert_contains "$(cat "$LOG")" 'body={"prompt":"hi","max_cost_micros":40000}' "request body"
assert_contains "$out" "   5.25  Shell             \$ pwd; whoami" "shell line layout"
assert_contains "$out" "  16.24  Worker destroyed  \$0.00353 charged, \$0.03647 released" "final line"
assert_eq "$(printf '%s\n' "$out" | tail -n 1)" "Model \$0.00033 · Web \$0.00 · Compute \$0.0032" "cost line"
assert_eq "$(printf '%s\n' "$out" | head -n 1)" "$RUN · openai/gpt-6-luna" "header"
grep -q "idempotency-key=........-....-4...-[89ab]...-............" "$LOG" || fail "generated key form"

# watch follows the same way.
out=$("$EPH" watch "$RUN"); rc=$?
assert_eq "$rc" 0 "watch exit"
assert_eq "$(printf '%s\n' "$out" | labels)" "$expected_labels" "watch timeline"

# The text commands.
out=$("$EPH" get "$RUN") || fail "get"
assert_contains "$out" "Usage        3 model calls (5 attempts) · 5,214 tokens (4,811 in, 403 out)" "get usage"
assert_contains "$out" "Cost         [██░░░░░░░░░░░░░░░░░░] \$0.00353 of \$0.04 charged · \$0.03647 released" "get cost bar"
assert_contains "$out" "Finished     2026-10-07T15:02:04.360Z (16.24 s after creation)" "get duration"
out=$("$EPH" list --limit 5 --status completed) || fail "list"
assert_contains "$(cat "$LOG")" "list query=limit=5&status=completed" "list query"
assert_contains "$out" "$RUN  completed         2026-10-07 15:01:48     16.24 s  \$0.00353" "list row"
out=$("$EPH" balance) || fail "balance"
assert_eq "$out" "$(printf 'Balance    $99.96\nReserved   $0.04\nAvailable  $99.92')" "balance"
out=$("$EPH" cancel "$RUN") || fail "cancel"
assert_eq "$out" "$RUN cancelled" "cancel"
out=$("$EPH" run --prompt x --budget 1 --detach) || fail "detach"
assert_eq "$out" "$RUN" "detach prints the id"

# A wrong key: the API's message, exit 4, and no key in sight.
out=$(EPHEMERAL_API_KEY=eph_wrongwrongwrong "$EPH" balance 2>&1); rc=$?
assert_eq "$rc" 4 "wrong key exit (refused: 4xx)"
assert_contains "$out" "ephemeral: missing or unknown api key" "wrong key message"
assert_not_contains "$out" "wrongwrong" "wrong key echoed"
# A validation error from the server: its message, exit 4.
out=$(printf '{"prompt":"x","max_cost_micros":"5"}' | "$EPH" run - 2>&1); rc=$?
assert_eq "$rc" 4 "invalid request exit (refused: 4xx)"
assert_eq "$out" "ephemeral: max_cost_micros must be an integer" "invalid request message"
# A device is not a file to send.
out=$("$EPH" run --prompt x --max-cost-micros 5 --file /dev/null 2>&1); rc=$?
assert_eq "$rc" 2 "bad file exit"
assert_contains "$out" "not a regular file" "bad file message"

# 2. No event stream: the JSON list, polled with ?after=SEQ.
fake json
out=$("$EPH" run --prompt "hi" --budget 0.04); rc=$?
assert_eq "$rc" 0 "exit with polling"
assert_eq "$(printf '%s\n' "$out" | labels)" "$expected_labels" "polled timeline"
assert_contains "$(cat "$LOG")" "poll after=4" "polled after the last event"
assert_contains "$(cat "$LOG")" "poll after=8" "polled again"

# 3. The POST is lost: one retry, with the same idempotency key.
fake dropPOST
out=$("$EPH" run --prompt "hi" --budget 0.04 2>"$TEST_TMP/drop.err"); rc=$?
assert_eq "$rc" 0 "exit after a retried POST"
assert_contains "$(cat "$TEST_TMP/drop.err")" "retrying once" "retry said"
keys=$(grep '^idempotency-key=' "$LOG" | sort -u | wc -l)
assert_eq "$(grep -c '^idempotency-key=' "$LOG")" 2 "two attempts"
assert_eq "$keys" 1 "one key for both attempts"

# 4. An answer over the cap.
fake big
out=$("$EPH" balance 2>&1); rc=$?
assert_eq "$rc" 5 "too large exit (not an answer of the api)"
assert_contains "$out" "too large (over 16 MiB)" "too large message"

# 5. Nobody listening.
port=$(free_port)
out=$(EPHEMERAL_URL="http://127.0.0.1:$port" "$EPH" balance 2>&1); rc=$?
assert_eq "$rc" 3 "unreachable exit"
assert_contains "$out" "cannot reach http://127.0.0.1:$port" "unreachable message"
out=$(EPHEMERAL_URL="http://user:secretpw@127.0.0.1:$port" "$EPH" balance 2>&1)
assert_not_contains "$out" "secretpw" "credentials in EPHEMERAL_URL shown"
out=$(EPHEMERAL_URL="ftp://127.0.0.1" "$EPH" balance 2>&1); rc=$?
assert_eq "$rc" 2 "non-http url exit"
echo ok
