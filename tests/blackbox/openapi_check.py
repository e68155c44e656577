#!/usr/bin/env python3
"""Checks a live ephemerald against docs/openapi.yaml.

For every operation the document describes, it makes real requests (the scenarios below), and
checks that each answer's status is one the operation documents and that its JSON body validates
against the documented schema (types, required and unknown properties, enums, consts, patterns,
bounds, $ref, oneOf/allOf). Every operation must be exercised, and every documented status too,
except the few listed in NOT_EXERCISED with the test that covers them.

Usage: openapi_check.py SPEC URL ADMIN_KEY DB_PATH
Standard library only, plus PyYAML (Debian python3-yaml) to read the document.
"""
import http.client
import json
import re
import sqlite3
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import yaml

SPEC_PATH, URL, ADMIN, DB = sys.argv[1:5]
SPEC = yaml.safe_load(open(SPEC_PATH))
failures = []
exercised = {}  # (method, path template) -> set of statuses seen

# Documented answers that this check does not provoke, and where they are tested instead.
NOT_EXERCISED = {
    ("post", "/v1/runs", "503"): "api_ops.sh (shutdown), test_api_validate (queue refused)",
    ("get", "/healthz", "503"): "api_ops.sh (shutdown)",
    ("delete", "/v1/keys/{id}", "409"): "api_edges.sh (the last admin key)",
    ("delete", "/v1/images/{name}", "409"): "images.sh (a run holds the image)",
    ("get", "/v1/images/{name}/log", "200"): "images.sh (the log streamed while it builds)",
    ("post", "/v1/sandboxes", "409"): "images.sh (image_not_ready), the idempotency 409 as for runs",
    ("post", "/v1/sandboxes", "422"): "sandboxes.sh (an idempotent create), as for runs",
    ("get", "/v1/sandboxes/{id}/commands/{cid}", "409"): "pg_sandboxes (sandbox_elsewhere)",
    ("get", "/v1/sandboxes/{id}/commands/{cid}/events", "409"): "pg_sandboxes (sandbox_elsewhere)",
    ("get", "/v1/sandboxes/{id}/files", "502"): "the guest failing the call",
    ("get", "/v1/sandboxes/{id}/files", "504"): "the guest not answering",
    ("put", "/v1/sandboxes/{id}/files/{path}", "502"): "the guest failing the call",
    ("put", "/v1/sandboxes/{id}/files/{path}", "504"): "the guest not answering",
    ("get", "/v1/sandboxes/{id}/files/{path}", "502"): "the guest failing the call",
    ("get", "/v1/sandboxes/{id}/files/{path}", "504"): "the guest not answering",
}
# Answers every operation documents that no scenario here can provoke.
GENERIC_NOT_EXERCISED = {
    "500": "server.c's answer when a handler could not build one (out of memory)",
    "503": "the store unavailable: store_full.sh",
}
REQUEST_ID = re.compile(r"^req_[0-9a-f]{16}$")


def fail(msg):
    failures.append(msg)
    print("FAIL:", msg)


def resolve(schema):
    while isinstance(schema, dict) and "$ref" in schema:
        ref = schema["$ref"]
        assert ref.startswith("#/"), ref
        node = SPEC
        for part in ref[2:].split("/"):
            node = node[part]
        schema = node
    return schema


def type_ok(value, t):
    if t == "null":
        return value is None
    if t == "boolean":
        return isinstance(value, bool)
    if t == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if t == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if t == "string":
        return isinstance(value, str)
    if t == "array":
        return isinstance(value, list)
    if t == "object":
        return isinstance(value, dict)
    raise ValueError("unknown type " + t)


def validate(value, schema, where):
    """Returns a list of problems (empty when value matches schema)."""
    schema = resolve(schema)
    errs = []
    if "oneOf" in schema:
        matches = [s for s in schema["oneOf"] if not validate(value, s, where)]
        if len(matches) != 1:
            errs.append(f"{where}: matches {len(matches)} of oneOf")
        return errs
    for sub in schema.get("allOf", []):
        errs += validate(value, sub, where)
    if "const" in schema and value != schema["const"]:
        errs.append(f"{where}: {value!r} is not {schema['const']!r}")
    if "enum" in schema and value not in schema["enum"]:
        errs.append(f"{where}: {value!r} not in {schema['enum']}")
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(type_ok(value, t) for t in types):
            return errs + [f"{where}: {value!r:.80} is not {types}"]
    if isinstance(value, str):
        if "pattern" in schema and not re.search(schema["pattern"], value):
            errs.append(f"{where}: {value!r:.80} does not match {schema['pattern']}")
        if "minLength" in schema and len(value) < schema["minLength"]:
            errs.append(f"{where}: shorter than {schema['minLength']}")
        if "maxLength" in schema and len(value.encode()) > schema["maxLength"]:
            errs.append(f"{where}: longer than {schema['maxLength']}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            errs.append(f"{where}: {value} < {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            errs.append(f"{where}: {value} > {schema['maximum']}")
    if isinstance(value, list):
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            errs.append(f"{where}: more than {schema['maxItems']} items")
        if "minItems" in schema and len(value) < schema["minItems"]:
            errs.append(f"{where}: fewer than {schema['minItems']} items")
        if "items" in schema:
            for i, item in enumerate(value):
                errs += validate(item, schema["items"], f"{where}[{i}]")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for name in schema.get("required", []):
            if name not in value:
                errs.append(f"{where}: missing required '{name}'")
        extra = schema.get("additionalProperties", True)
        for name, v in value.items():
            if name in props:
                errs += validate(v, props[name], f"{where}.{name}")
            elif extra is False:
                errs.append(f"{where}: undocumented property '{name}'")
            elif isinstance(extra, dict):
                errs += validate(v, extra, f"{where}.{name}")
        if "maxProperties" in schema and len(value) > schema["maxProperties"]:
            errs.append(f"{where}: more than {schema['maxProperties']} properties")
    return errs


def announce(method, path, length, key=ADMIN):
    """A request that announces a body of length bytes and sends none: the server must refuse it
    from the headers alone (sending the body would race the server closing the connection)."""
    u = urllib.parse.urlsplit(URL)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    conn.putrequest(method.upper(), path)
    conn.putheader("Authorization", "Bearer " + key)
    conn.putheader("Content-Type", "application/json")
    conn.putheader("Content-Length", str(length))
    conn.endheaders()
    resp = conn.getresponse()
    out = resp.status, dict(resp.getheaders()), resp.read()
    conn.close()
    return out


def request_from(source, method, path, key):
    """A request from another loopback address (the failed-key limit counts per address)."""
    u = urllib.parse.urlsplit(URL)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30, source_address=(source, 0))
    conn.putrequest(method.upper(), path)
    conn.putheader("Authorization", "Bearer " + key)
    conn.endheaders()
    resp = conn.getresponse()
    out = resp.status, dict(resp.getheaders()), resp.read()
    conn.close()
    return out


def request(method, path, body=None, key=ADMIN, headers=None, raw=None, announce_len=None,
            source=None):
    if announce_len is not None:
        return announce(method, path, announce_len, key)
    if source is not None:
        return request_from(source, method, path, key)
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(URL + path, data=data, method=method.upper())
    if key:
        req.add_header("Authorization", "Bearer " + key)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def header(headers, name):
    for k, v in headers.items():
        if k.lower() == name.lower():
            return v
    return None


def common_headers(label, status, headers, payload):
    """What every answer carries: a Request-Id (repeated in an error body), Retry-After on 429
    and 503."""
    rid = header(headers, "Request-Id")
    if not rid or not REQUEST_ID.match(rid):
        fail(f"{label}: no Request-Id header ({rid!r})")
    if status >= 400 and payload[:1] == b"{":
        try:
            err = json.loads(payload).get("error")
        except ValueError:
            err = None
        if isinstance(err, dict) and err.get("request_id") != rid:
            fail(f"{label}: error.request_id {err.get('request_id')!r} is not the header's {rid!r}")
    if status in (429, 503) and not (header(headers, "Retry-After") or "").isdigit():
        fail(f"{label}: {status} without Retry-After")


def check(method, template, path, expect, **kw):
    """One scenario: the call, its documented status, its body against the schema."""
    status, headers, payload = request(method, path, **kw)
    op = SPEC["paths"][template][method]
    common_headers(f"{method.upper()} {path}", status, headers, payload)
    exercised.setdefault((method, template), set()).add(str(status))
    label = f"{method.upper()} {path} [{kw.get('headers') or ''}]"
    if status != expect:
        fail(f"{label}: status {status}, expected {expect}: {payload[:300]!r}")
    responses = op["responses"]
    if str(status) not in responses:
        fail(f"{label}: status {status} is not documented")
        return status, None
    resp = resolve(responses[str(status)])
    ctype = headers.get("Content-Type", "").split(";")[0].strip()
    content = resp.get("content", {})
    if ctype not in content:
        fail(f"{label}: content type {ctype!r} not documented for {status}")
        return status, None
    if ctype != "application/json":
        return status, payload.decode()
    try:
        doc = json.loads(payload)
    except ValueError:
        fail(f"{label}: the body is not JSON: {payload[:200]!r}")
        return status, None
    for e in validate(doc, content[ctype]["schema"], "body"):
        fail(f"{label}: {e}")
    return status, doc


def wait_for(what, pred, tries=400):
    for _ in range(tries):
        if pred():
            return
        time.sleep(0.05)
    fail("timed out waiting for " + what)


def run_status(rid):
    return json.loads(request("get", f"/v1/runs/{rid}")[2])["status"]


def has_event(rid, typ):
    events = json.loads(request("get", f"/v1/runs/{rid}/events")[2])["data"]
    return any(e["type"] == typ for e in events)


fixtures = json.load(open(sys.argv[5])) if len(sys.argv) > 5 else {}
SLOW, QUICK = fixtures["slow"], fixtures["quick"]

# --- operations ---
check("get", "/healthz", "/healthz", 200, key=None)
check("get", "/metrics", "/metrics", 200, key=None)
check("get", "/v1/balance", "/v1/balance", 200)
check("get", "/v1/balance", "/v1/balance", 401, key=None)

# Runs: one that completes (waited on), one blocked, one queued behind it (max_concurrent_runs 1,
# max_queued_runs_per_org 1 in this server's config), then the queue limit.
_, done = check("post", "/v1/runs", "/v1/runs", 201, body={"prompt": QUICK, "max_cost_micros": 20000},
                headers={"Prefer": "wait=30", "Idempotency-Key": "oa-1"})
done_id = done["id"]
check("post", "/v1/runs", "/v1/runs", 200, body={"prompt": QUICK, "max_cost_micros": 20000},
      headers={"Idempotency-Key": "oa-1"})
check("post", "/v1/runs", "/v1/runs", 422, body={"prompt": QUICK, "max_cost_micros": 20001},
      headers={"Idempotency-Key": "oa-1"})
_, slow = check("post", "/v1/runs", "/v1/runs", 201, body={"prompt": SLOW, "max_cost_micros": 30000})
slow_id = slow["id"]
wait_for("the slow run to run its command", lambda: has_event(slow_id, "model.call"))
_, queued = check("post", "/v1/runs", "/v1/runs", 201, body={"prompt": QUICK, "max_cost_micros": 1000})
check("post", "/v1/runs", "/v1/runs", 429, body={"prompt": QUICK, "max_cost_micros": 1000})
check("post", "/v1/runs/{id}/cancel", f"/v1/runs/{queued['id']}/cancel", 200)
check("post", "/v1/runs", "/v1/runs", 400, body={"prompt": "", "max_cost_micros": 1})
check("post", "/v1/runs", "/v1/runs", 400, body={"prompt": "p", "max_cost_micros": 1, "x": 1})
check("post", "/v1/runs", "/v1/runs", 400, body={"replay_of": "run_x", "max_cost_micros": 1})
check("post", "/v1/runs", "/v1/runs", 401, body={"prompt": "p", "max_cost_micros": 1}, key=None)
check("post", "/v1/runs", "/v1/runs", 402, body={"prompt": QUICK, "max_cost_micros": 10**14})
# Runs that cannot succeed, refused before anything is reserved: a budget below one model call,
# a prompt the replay model has no recording of.
check("post", "/v1/runs", "/v1/runs", 402, body={"prompt": QUICK, "max_cost_micros": 1})
check("post", "/v1/runs", "/v1/runs", 422, body={"prompt": "no recording has this", "max_cost_micros": 1000})
check("get", "/v1/models", "/v1/models", 200)
check("get", "/v1/models", "/v1/models", 401, key=None)
check("post", "/v1/runs", "/v1/runs", 413, announce_len=2 << 20)
# 409: a first request with the key is in flight (its record has no answer yet).
db = sqlite3.connect(DB, timeout=5)
db.execute("INSERT INTO idempotency (org_id, key, request_hash, created_at) "
           "SELECT org_id, 'oa-inflight', request_hash, ? FROM idempotency WHERE key = 'oa-1'",
           (int(time.time() * 1000),))
db.commit()
db.close()
check("post", "/v1/runs", "/v1/runs", 409, body={"prompt": QUICK, "max_cost_micros": 20000},
      headers={"Idempotency-Key": "oa-inflight"})

check("get", "/v1/runs", "/v1/runs?limit=2", 200)
check("get", "/v1/runs", f"/v1/runs?limit=1&after={done_id}&status=completed", 200)
check("get", "/v1/runs", "/v1/runs?limit=0", 400)
check("get", "/v1/runs", "/v1/runs", 401, key=None)
check("get", "/v1/runs/{id}", f"/v1/runs/{done_id}", 200)
check("get", "/v1/runs/{id}", f"/v1/runs/{slow_id}", 200, headers={"Prefer": "wait=1"})
check("get", "/v1/runs/{id}", "/v1/runs/run_00000000000000000000000000000000", 404)
check("get", "/v1/runs/{id}", f"/v1/runs/{done_id}", 401, key=None)
check("get", "/v1/runs/{id}/events", f"/v1/runs/{done_id}/events", 200)
check("get", "/v1/runs/{id}/events", f"/v1/runs/{done_id}/events?after=2", 200)
_, text = check("get", "/v1/runs/{id}/events", f"/v1/runs/{done_id}/events", 200,
                headers={"Accept": "text/event-stream", "Last-Event-ID": "1"})
if text is not None and ("id: 2\n" not in text or "event: worker.destroyed\n" not in text):
    fail(f"event stream: {text[:300]!r}")
check("get", "/v1/runs/{id}/events", f"/v1/runs/{done_id}/events?after=x", 400)
check("get", "/v1/runs/{id}/events", "/v1/runs/run_00000000000000000000000000000000/events", 404)
check("get", "/v1/runs/{id}/events", f"/v1/runs/{done_id}/events", 401, key=None)
check("get", "/v1/runs/{id}/transcript", f"/v1/runs/{done_id}/transcript", 200)
check("get", "/v1/runs/{id}/transcript", "/v1/runs/run_00000000000000000000000000000000/transcript", 404)
check("get", "/v1/runs/{id}/transcript", f"/v1/runs/{done_id}/transcript", 401, key=None)
check("post", "/v1/runs/{id}/cancel", f"/v1/runs/{slow_id}/cancel", 200, headers={"Idempotency-Key": "oa-c"})
check("post", "/v1/runs/{id}/cancel", f"/v1/runs/{done_id}/cancel", 422, headers={"Idempotency-Key": "oa-c"})
check("post", "/v1/runs/{id}/cancel", "/v1/runs/run_00000000000000000000000000000000/cancel", 404)
check("post", "/v1/runs/{id}/cancel", f"/v1/runs/{done_id}/cancel", 401, key=None)

# Keys.
_, created = check("post", "/v1/keys", "/v1/keys", 201, body={"role": "member"})
member = created["key"]
check("post", "/v1/keys", "/v1/keys", 201)
check("post", "/v1/keys", "/v1/keys", 400, body={"role": "root"})
check("post", "/v1/keys", "/v1/keys", 401, key=None)
check("post", "/v1/keys", "/v1/keys", 403, key=member)
check("get", "/v1/keys", "/v1/keys", 200)
check("get", "/v1/keys", "/v1/keys", 401, key=None)
check("get", "/v1/keys", "/v1/keys", 403, key=member)

# Credits.
check("post", "/v1/credits", "/v1/credits", 200, body={"micros": 5}, headers={"Idempotency-Key": "oa-cr"})
check("post", "/v1/credits", "/v1/credits", 422, body={"micros": 6}, headers={"Idempotency-Key": "oa-cr"})
check("post", "/v1/credits", "/v1/credits", 400, body={"micros": -1})
check("post", "/v1/credits", "/v1/credits", 401, body={"micros": 5}, key=None)
check("post", "/v1/credits", "/v1/credits", 403, body={"micros": 5}, key=member)

# Connections.
conn = {"name": "svc", "base_url": "https://svc.example", "methods": ["GET"],
        "path_prefixes": ["/v1"], "headers": {"Authorization": "Bearer openapi-check-secret"}}
_, c = check("post", "/v1/connections", "/v1/connections", 201, body=conn)
check("post", "/v1/connections", "/v1/connections", 409, body=conn)
check("post", "/v1/connections", "/v1/connections", 400, body={"name": "BAD", "base_url": "https://x"})
check("post", "/v1/connections", "/v1/connections", 401, body=conn, key=None)
check("post", "/v1/connections", "/v1/connections", 403, body=conn, key=member)
check("get", "/v1/connections", "/v1/connections", 200)
check("get", "/v1/connections", "/v1/connections", 401, key=None)
check("get", "/v1/connections", "/v1/connections", 403, key=member)
check("get", "/v1/connections/{name}", "/v1/connections/svc", 200)
check("get", "/v1/connections/{name}", "/v1/connections/none", 404)
check("get", "/v1/connections/{name}", "/v1/connections/svc", 401, key=None)
check("get", "/v1/connections/{name}", "/v1/connections/svc", 403, key=member)
check("delete", "/v1/connections/{name}", "/v1/connections/svc", 403, key=member)
check("delete", "/v1/connections/{name}", "/v1/connections/svc", 401, key=None)
check("delete", "/v1/connections/{name}", "/v1/connections/svc", 200)
check("delete", "/v1/connections/{name}", "/v1/connections/svc", 404)
# Images: a recipe whose package does not exist starts a build that fails (or is killed when the
# server stops); its answer is the 202 all the same.
img = {"name": "oa-img", "packages": ["no-such-package-oa"]}
check("post", "/v1/images", "/v1/images", 202, body=img)
check("post", "/v1/images", "/v1/images", 409, body=img)
check("post", "/v1/images", "/v1/images", 400, body={"name": "default"})
check("post", "/v1/images", "/v1/images", 401, body=img, key=None)
check("post", "/v1/images", "/v1/images", 403, body=img, key=member)
check("get", "/v1/images", "/v1/images", 200)
check("get", "/v1/images", "/v1/images", 401, key=None)
check("get", "/v1/images", "/v1/images", 403, key=member)
check("get", "/v1/images/{name}", "/v1/images/oa-img", 200)
check("get", "/v1/images/{name}", "/v1/images/none", 404)
check("get", "/v1/images/{name}", "/v1/images/oa-img", 401, key=None)
check("get", "/v1/images/{name}", "/v1/images/oa-img", 403, key=member)
check("get", "/v1/images/{name}/log", "/v1/images/none/log", 404)
check("get", "/v1/images/{name}/log", "/v1/images/oa-img/log", 401, key=None)
check("get", "/v1/images/{name}/log", "/v1/images/oa-img/log", 403, key=member)
check("delete", "/v1/images/{name}", "/v1/images/oa-img", 403, key=member)
check("delete", "/v1/images/{name}", "/v1/images/oa-img", 401, key=None)
check("delete", "/v1/images/{name}", "/v1/images/oa-img", 200)
check("delete", "/v1/images/{name}", "/v1/images/oa-img", 404)

# Webhooks: an endpoint on a closed loopback port (api_openapi.sh opens 127.0.0.1/32 to them), so
# that a delivery, if a run ended meanwhile, reaches nothing.
hook = {"url": "http://127.0.0.1:9/hook", "events": ["run.completed"]}
_, wh = check("post", "/v1/webhooks", "/v1/webhooks", 201, body=hook)
check("post", "/v1/webhooks", "/v1/webhooks", 400, body={"url": "ftp://127.0.0.1:9/"})
check("post", "/v1/webhooks", "/v1/webhooks", 401, body=hook, key=None)
check("post", "/v1/webhooks", "/v1/webhooks", 403, body=hook, key=member)
check("get", "/v1/webhooks", "/v1/webhooks", 200)
check("get", "/v1/webhooks", "/v1/webhooks", 401, key=None)
check("get", "/v1/webhooks", "/v1/webhooks", 403, key=member)
wid = wh["id"] if wh else "wh_" + "0" * 24
for t, tail in (("/v1/webhooks/{id}", ""), ("/v1/webhooks/{id}/deliveries", "/deliveries")):
    check("get", t, f"/v1/webhooks/{wid}{tail}", 200)
    check("get", t, f"/v1/webhooks/wh_{'0' * 24}{tail}", 404)
    check("get", t, f"/v1/webhooks/{wid}{tail}", 401, key=None)
    check("get", t, f"/v1/webhooks/{wid}{tail}", 403, key=member)
check("get", "/v1/webhooks/{id}/deliveries", f"/v1/webhooks/{wid}/deliveries?limit=0", 400)
check("get", "/v1/webhooks/{id}/deliveries", f"/v1/webhooks/{wid}/deliveries?after=x", 400)
# One delivery with one attempt in its history, written as the store would (no run ends here).
evt = "evt_" + "ab" * 16
now_ms = int(time.time() * 1000)
db = sqlite3.connect(DB, timeout=5)
db.execute("INSERT INTO webhook_deliveries (event_id, webhook_id, org_id, type, body, state, "
           "attempts, created_at, next_attempt_at, last_attempt_at, last_status, last_error, "
           "last_duration_ms) SELECT ?, id, org_id, 'run.completed', '', 'failed', 1, ?, ?, ?, "
           "500, 'HTTP 500', 7 FROM webhooks WHERE id = ?", (evt, now_ms, now_ms, now_ms, wid))
db.execute("INSERT INTO webhook_attempts (event_id, webhook_id, org_id, attempt, outcome, at, "
           "http_status, duration_ms, error) SELECT ?, id, org_id, 1, 'failed', ?, 500, 7, "
           "'HTTP 500' FROM webhooks WHERE id = ?", (evt, now_ms, wid))
db.commit()
db.close()
t = "/v1/webhooks/{id}/deliveries/{event_id}"
_, one = check("get", t, f"/v1/webhooks/{wid}/deliveries/{evt}", 200)
if not one or [a["outcome"] for a in one["history"]] != ["failed"]:
    fail(f"GET {t}: history {one}")
check("get", t, f"/v1/webhooks/{wid}/deliveries/evt_{'0' * 32}", 404)
check("get", t, f"/v1/webhooks/wh_{'0' * 24}/deliveries/{evt}", 404)
check("get", t, f"/v1/webhooks/{wid}/deliveries/{evt}?limit=1", 400)
check("get", t, f"/v1/webhooks/{wid}/deliveries/{evt}", 401, key=None)
check("get", t, f"/v1/webhooks/{wid}/deliveries/{evt}", 403, key=member)
check("delete", "/v1/webhooks/{id}", f"/v1/webhooks/{wid}", 403, key=member)
check("delete", "/v1/webhooks/{id}", f"/v1/webhooks/{wid}", 401, key=None)
check("delete", "/v1/webhooks/{id}", f"/v1/webhooks/{wid}", 200)
check("delete", "/v1/webhooks/{id}", f"/v1/webhooks/{wid}", 404)

# Sandboxes (docs/SANDBOXES.md): one made ready, driven, deleted; then its calls are 409.
SB = "/v1/sandboxes"
NOSB = "sbx_" + "0" * 32
_, sb = check("post", SB, SB, 201, body={"max_cost_micros": 200000, "metadata": {"oa": "1"}},
              headers={"Prefer": "wait=120", "Idempotency-Key": "oa-sb"})
sid = sb["id"] if sb else NOSB
check("post", SB, SB, 200, body={"max_cost_micros": 200000, "metadata": {"oa": "1"}},
      headers={"Idempotency-Key": "oa-sb"})
check("post", SB, SB, 400, body={"max_cost_micros": 200000, "x": 1})
check("post", SB, SB, 401, body={"max_cost_micros": 200000}, key=None)
check("get", SB, SB + "?limit=1&metadata[oa]=1&status=ready", 200)
check("get", SB, SB + "?limit=0", 400)
check("get", SB, SB, 401, key=None)
S = SB + "/{id}"
check("get", S, f"{SB}/{sid}", 200)
check("get", S, f"{SB}/{NOSB}", 404)
check("get", S, f"{SB}/{sid}", 401, key=None)
C = S + "/commands"
J = {"Prefer": "wait=60"}
_, cmd = check("post", C, f"{SB}/{sid}/commands", 200, body={"command": "echo hi; exit 3"}, headers=J)
if cmd and (cmd.get("exit_code") != 3 or cmd.get("stdout") != "hi\n"):
    fail(f"command: {cmd}")
cid = cmd["id"] if cmd else "cmd_" + "0" * 24
_, text = check("post", C, f"{SB}/{sid}/commands", 200, body={"command": "echo streamed"},
                headers={"Accept": "text/event-stream", "Prefer": "wait=60"})
if text is not None and ("event: stdout" not in text or "event: exit" not in text):
    fail(f"command stream: {text[:300]!r}")
_, bg = check("post", C, f"{SB}/{sid}/commands", 202, body={"command": "sleep 600", "background": True})
bid = bg["id"] if bg else cid
check("post", C, f"{SB}/{sid}/commands", 400, body={"command": ""})
check("post", C, f"{SB}/{NOSB}/commands", 404, body={"command": "true"})
check("post", C, f"{SB}/{sid}/commands", 401, body={"command": "true"}, key=None)
K = C + "/{cid}"
check("get", K, f"{SB}/{sid}/commands/{cid}", 200)
check("get", K, f"{SB}/{sid}/commands/cmd_{'0' * 24}", 404)
check("get", K, f"{SB}/{sid}/commands/{cid}", 401, key=None)
check("post", K + "/kill", f"{SB}/{sid}/commands/{cid}/kill", 409)
check("post", K + "/kill", f"{SB}/{sid}/commands/cmd_{'0' * 24}/kill", 404)
check("post", K + "/kill", f"{SB}/{sid}/commands/{bid}/kill", 401, key=None)
_, killed = check("post", K + "/kill", f"{SB}/{sid}/commands/{bid}/kill", 200)
_, text = check("get", K + "/events", f"{SB}/{sid}/commands/{bid}/events", 200)
if text is not None and "event: exit" not in text:
    fail(f"background stream: {text[:300]!r}")
check("get", K + "/events", f"{SB}/{sid}/commands/cmd_{'0' * 24}/events", 404)
check("get", K + "/events", f"{SB}/{sid}/commands/{bid}/events", 401, key=None)
E = S + "/events"
check("get", E, f"{SB}/{sid}/events?after=1", 200)
# (its stream stays open while the sandbox lives: it is read after the delete)
check("get", E, f"{SB}/{sid}/events?after=x", 400)
check("get", E, f"{SB}/{NOSB}/events", 404)
check("get", E, f"{SB}/{sid}/events", 401, key=None)
F = S + "/files/{path}"
OCT = {"Content-Type": "application/octet-stream"}
check("put", F, f"{SB}/{sid}/files/d/a.txt", 200, raw=b"bytes\n", headers=OCT)
check("put", F, f"{SB}/{sid}/files/../x", 400, raw=b"x", headers=OCT)
check("put", F, f"{SB}/{NOSB}/files/a", 404, raw=b"x", headers=OCT)
check("put", F, f"{SB}/{sid}/files/a", 401, raw=b"x", headers=OCT, key=None)
_, got = check("get", F, f"{SB}/{sid}/files/d/a.txt", 200)
check("get", F, f"{SB}/{sid}/files/none", 404)
check("get", F, f"{SB}/{sid}/files/a/../b", 400)
check("get", F, f"{SB}/{sid}/files/d/a.txt", 401, key=None)
L = S + "/files"
_, ls = check("get", L, f"{SB}/{sid}/files?path=d", 200)
if ls and [e["path"] for e in ls["data"]] != ["d/a.txt"] and not any(
        e["path"].endswith("a.txt") for e in ls["data"]):
    fail(f"listing: {ls}")
check("get", L, f"{SB}/{sid}/files?path=/etc", 400)
check("get", L, f"{SB}/{NOSB}/files", 404)
check("get", L, f"{SB}/{sid}/files", 401, key=None)
check("delete", S, f"{SB}/{sid}", 401, key=None)
check("delete", S, f"{SB}/{NOSB}", 404)
check("delete", S, f"{SB}/{sid}", 200)
check("delete", S, f"{SB}/{sid}", 200)
_, text = check("get", E, f"{SB}/{sid}/events", 200,
                headers={"Accept": "text/event-stream", "Last-Event-ID": "1"})
if text is not None and "event: worker.destroyed\n" not in text:
    fail(f"sandbox event stream: {text[:300]!r}")
check("post", C, f"{SB}/{sid}/commands", 409, body={"command": "true"})
check("put", F, f"{SB}/{sid}/files/a", 409, raw=b"x", headers=OCT)
check("get", F, f"{SB}/{sid}/files/a", 409)
check("get", L, f"{SB}/{sid}/files", 409)
check("post", SB, SB, 402, body={"max_cost_micros": 1})  # (no sandbox live: not the 429)
# 429: the limit of live sandboxes (api_openapi.sh: sandboxes.max_live_per_org 1)
_, s1 = check("post", SB, SB, 201, body={"max_cost_micros": 200000})
check("post", SB, SB, 429, body={"max_cost_micros": 200000})
if s1:
    request("delete", f"{SB}/{s1['id']}")

# Revocation last (the member key is used above).
check("delete", "/v1/keys/{id}", f"/v1/keys/{created['id']}", 403, key=member)
check("delete", "/v1/keys/{id}", f"/v1/keys/{created['id']}", 401, key=None)
check("delete", "/v1/keys/{id}", f"/v1/keys/{created['id']}", 200)
check("delete", "/v1/keys/{id}", f"/v1/keys/{created['id']}", 404)
check("get", "/v1/balance", "/v1/balance", 401, key=member)

# --- what the HTTP layer answers on every operation, before any handler ---
def concrete(template):
    ident = ("run_" + "0" * 32 if template.startswith("/v1/runs") else
             "sbx_" + "0" * 32 if template.startswith("/v1/sandboxes") else "key_" + "0" * 24)
    return (template.replace("{id}", ident).replace("{name}", "none")
            .replace("{cid}", "cmd_" + "0" * 24).replace("{path}", "none")
            .replace("{event_id}", "evt_" + "0" * 32))


METHODS = ("get", "post", "put", "patch", "delete")
# An address that presented too many keys that are not valid: every key it presents is refused
# (429), a good one too, on every operation that takes one. Limited again before each check, so
# that its bucket is empty then (a failure's worth takes seconds to refill).
LIMITED = "127.0.0.9"


def limit(source):
    for _ in range(1000):
        if request_from(source, "get", "/v1/balance", "eph_" + "0" * 40)[0] == 429:
            return
    fail(f"{source}: never limited after 1000 failed keys")


for template, item in SPEC["paths"].items():
    path = concrete(template)
    for method, op in item.items():
        if method not in METHODS:
            continue
        # an unknown query parameter, a body that is not JSON, a body over the limit
        check(method, template, path + "?no_such_parameter=1", 400)
        if "401" in op["responses"]:
            limit(LIMITED)
            check(method, template, path, 429, source=LIMITED)
        if "415" in op["responses"]:  # a file's operations take any bytes
            check(method, template, path, 415, raw=b"x=1",
                  headers={"Content-Type": "application/x-www-form-urlencoded"})
        check(method, template, path, 413, announce_len=2 << 20)
        if method == "get":
            # HEAD is GET without the body
            status, headers, payload = request("head", path)
            want, _, _ = request("get", path)
            if status != want or payload:
                fail(f"HEAD {path}: {status} with {len(payload)} bytes, GET answers {want}")
            common_headers(f"HEAD {path}", status, headers, payload)
    # a method the path does not take: 405, the JSON error, Allow listing what the document says
    documented = {m.upper() for m in item if m in METHODS}
    if "GET" in documented:
        documented.add("HEAD")
    other = next(m for m in ("PATCH", "PUT", "DELETE", "POST") if m not in documented)
    status, headers, payload = request(other.lower(), path)
    common_headers(f"{other} {path}", status, headers, payload)
    if status != 405:
        fail(f"{other} {path}: status {status}, expected 405")
    else:
        for e in validate(json.loads(payload), SPEC["components"]["schemas"]["Error"], "body"):
            fail(f"{other} {path}: {e}")
        allow = {m.strip() for m in (header(headers, "Allow") or "").split(",") if m.strip()}
        if allow != documented:
            fail(f"{other} {path}: Allow {sorted(allow)}, the document has {sorted(documented)}")

# --- coverage: every documented operation and status was seen ---
for template, item in SPEC["paths"].items():
    for method, op in item.items():
        if method not in ("get", "post", "put", "patch", "delete"):
            continue
        seen = exercised.get((method, template))
        if not seen:
            fail(f"{method.upper()} {template}: never exercised")
            continue
        for status in op["responses"]:
            if (status not in seen and (method, template, status) not in NOT_EXERCISED and
                    status not in GENERIC_NOT_EXERCISED):
                fail(f"{method.upper()} {template}: documented status {status} never seen")
print(f"{sum(len(v) for v in exercised.values())} (operation, status) pairs checked, "
      f"{len(failures)} failures")
sys.exit(1 if failures else 0)
