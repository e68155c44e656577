"""The web UI in a real headless Chromium (Debian's chromium and chromium-driver), against a real
ephemerald. Run by tests/blackbox/webui_browser.sh, which starts the server and sets:

    WEBUI_SERVER   the server's URL          ADMIN_KEY, MEMBER_KEY   keys of the org "default"
    SHOTS          where screenshots go      TEST_TMP                a scratch directory
    SEED_REQUEST, SPACED_PROMPT, XSS_PROMPT, DIVERGE_PROMPT, SLOW_PROMPT   the fixtures' prompts
    OUTPUTS_REQUEST   the outputs fixture's request (its prompt and patterns)

The browser reaches the server through a small TCP proxy on another loopback port, which logs
every request line and header and can cut every connection at once (a network drop). Each test
prints PASS or FAIL; after every test the browser's console must hold no error, and every URL the
page requested must be of the page's own origin. Screenshots are saved under SHOTS for a person to
look at.
"""

import json
import os
import re
import signal
import socket
import sys
import threading
import time
import traceback
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from webdriver import Browser, KEYS  # noqa: E402

SERVER = os.environ["WEBUI_SERVER"]
ADMIN_KEY = os.environ["ADMIN_KEY"]
MEMBER_KEY = os.environ["MEMBER_KEY"]
SHOTS = os.environ["SHOTS"]
TMP = os.environ["TEST_TMP"]
SEED = json.load(open(os.environ["SEED_REQUEST"]))
SPACED_PROMPT = os.environ["SPACED_PROMPT"]
XSS_PROMPT = os.environ["XSS_PROMPT"]
DIVERGE_PROMPT = os.environ["DIVERGE_PROMPT"]
SLOW_PROMPT = os.environ["SLOW_PROMPT"]
LIVE_PROMPT = os.environ["LIVE_PROMPT"]
OUTPUTS_REQUEST = json.load(open(os.environ["OUTPUTS_REQUEST"]))
TERMINAL = {"completed", "failed", "timed_out", "budget_exhausted", "cancelled"}


# ---------------------------------------------------------------- the proxy

class Proxy:
    """A loopback TCP proxy in front of the server: logs requests, cuts connections on demand."""

    def __init__(self, target_port):
        self.target = target_port
        self.lsock = socket.socket()
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(64)
        self.port = self.lsock.getsockname()[1]
        self.lock = threading.Lock()
        self.socks = set()
        self.requests = []  # (method, path, {header: value}) in arrival order
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            try:
                u = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                c.close()
                continue
            with self.lock:
                self.socks.update((c, u))
            threading.Thread(target=self._pump, args=(c, u, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(u, c, False), daemon=True).start()

    def _pump(self, src, dst, log):
        buf, skip = b"", 0
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if log:
                    buf += data
                    while True:
                        if skip:
                            n = min(skip, len(buf))
                            buf, skip = buf[n:], skip - n
                            if skip:
                                break
                        end = buf.find(b"\r\n\r\n")
                        if end < 0:
                            break
                        head = buf[:end].decode("latin-1").split("\r\n")
                        buf = buf[end + 4:]
                        method, path = (head[0].split(" ") + ["", ""])[:2]
                        hdrs = {}
                        for line in head[1:]:
                            k, _, v = line.partition(":")
                            hdrs[k.strip().lower()] = v.strip()
                        with self.lock:
                            self.requests.append((method, path, hdrs))
                        skip = int(hdrs.get("content-length", "0") or 0)
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        with self.lock:
            self.socks.discard(src)
            self.socks.discard(dst)
        src.close()

    def cut(self):
        """Drops every open connection, both ways: the browser sees its streams end."""
        with self.lock:
            socks = list(self.socks)
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        return len(socks)

    def seen(self, method=None, prefix=""):
        with self.lock:
            return [r for r in self.requests
                    if (method is None or r[0] == method) and r[1].startswith(prefix)]


# ---------------------------------------------------------------- the API, directly

def api(method, path, key, body=None, headers=None, wait=None):
    """(status, json) from the server itself (not through the browser)."""
    h = {"Authorization": f"Bearer {key}", **(headers or {})}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        h["Content-Type"] = "application/json"
    if wait:
        h["Prefer"] = f"wait={wait}"
    req = urllib.request.Request(SERVER + path, data=data, method=method, headers=h)
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def new_run(prompt, cost=30000):
    st, run = api("POST", "/v1/runs", MEMBER_KEY, {"prompt": prompt, "max_cost_micros": cost})
    assert st == 201, f"create run: {st} {run}"
    return run["id"]


def finished(run_id, timeout=90):
    st, run = api("GET", f"/v1/runs/{run_id}", MEMBER_KEY, wait=timeout)
    assert st == 200 and run["status"] in TERMINAL, f"run {run_id} did not finish: {run}"
    return run


def cancel(run_id):
    """Cancels a run: 200, and cancelled once it has settled. The answer waits a few seconds for
    the settlement, which is usually enough; a sandbox whose teardown takes longer (gVisor's,
    on a loaded machine) settles just after, and is waited for here."""
    st, run = api("POST", f"/v1/runs/{run_id}/cancel", MEMBER_KEY)
    assert st == 200, run
    if run["status"] not in TERMINAL:
        run = finished(run_id)
    assert run["status"] == "cancelled", run
    return run


def events_of(run_id):
    st, ev = api("GET", f"/v1/runs/{run_id}/events", MEMBER_KEY)
    assert st == 200, ev
    return ev["data"]


def money(micros):
    """docs/MONEY.md, as the page must print it."""
    sign = "-" if micros < 0 else ""
    m = abs(micros)
    tens = m // 10 + (1 if m % 10 >= 5 else 0)
    digits = f"{tens % 100000:05d}"
    while len(digits) > 2 and digits.endswith("0"):
        digits = digits[:-1]
    return f"{sign}${tens // 100000}.{digits}"


# ---------------------------------------------------------------- the tests

TESTS = []


HTTP_4XX = r"Failed to load resource: the server responded with a status of 4\d\d"


def test(allow=()):
    """A test; allow: patterns of console errors the test provokes on purpose (the browser logs
    every refused request as one), checked after it like any other error."""
    def mark(fn):
        fn.allow = allow
        TESTS.append(fn)
        return fn
    return mark


class Ctx:
    pass


ctx = Ctx()
ctx.runs = {}


def shot(b, name, full=True):
    b.screenshot(os.path.join(SHOTS, f"{name}.png"), full_page=full)


def fill(b, css, text):
    """Replaces a field's value as typing would (input events included)."""
    el = b.find(css)
    el.clear()
    el.send_keys(text)


def use_key(b, key):
    """The key as a person enters it: the header's button, the dialog, Save."""
    b.get(ctx.url + "/")
    b.wait_js("the page", "return !!document.getElementById('pg-run')")
    b.find("#key-button").click()
    b.wait_js("the key dialog", "return document.getElementById('key-dialog').open")
    fill(b, "#key-input", key)
    b.js("document.querySelector('#main > *').setAttribute('data-before-key', '')")
    b.find("#key-form button[type=submit]").click()
    b.wait_js("the dialog to close", "return !document.getElementById('key-dialog').open")
    # Saving a key draws the page again with it: wait for the new page, not the old one.
    b.wait_js("the page drawn with the key", "return !document.querySelector('#main > [data-before-key]')"
              " && !!document.getElementById('pg-run')")
    b.wait_js("the balance", "return document.getElementById('balance').textContent.startsWith('Balance')")


def open_run(b, run_id, settled=False):
    """Opens a run's page (with the member's key, unless the tab holds one); when settled, waits
    until its event stream has ended."""
    if not b.js("try { return sessionStorage.getItem('ephemeral.api_key') } catch { return null }"):
        b.get(ctx.url + "/")
        b.js("sessionStorage.setItem('ephemeral.api_key', arguments[0])", MEMBER_KEY)
    b.get(f"{ctx.url}/runs/{run_id}")
    status = b.wait_js("the run's header", "return document.getElementById('run-status').textContent")
    if settled:
        b.wait_js("the end of the event stream",
                  "return document.getElementById('live-state').dataset.state === 'done'")
    return status


def wait_destroyed(b, timeout=90):
    return b.wait_js("'Worker destroyed' in the timeline",
                     "const r = document.querySelector('#timeline-body tr[data-type=\"worker.destroyed\"]');"
                     "return r && !r.hidden ? r.querySelector('.msg').textContent : null", timeout=timeout)


def timeline(b):
    return b.js("return [...document.querySelectorAll('#timeline-body tr')].map(r => ({"
                "seq: Number(r.dataset.seq), type: r.dataset.type, hidden: r.hidden,"
                "t: r.querySelector('.t').textContent, src: r.querySelector('.src').textContent,"
                "msg: r.querySelector('.msg').textContent}))")


@test()
def static_files_and_headers():
    """GET / and the assets: CSP, nosniff, no-referrer, caching; 304, 404 and 405 answers."""
    req = urllib.request.Request(SERVER + "/")
    with urllib.request.urlopen(req) as r:
        html = r.read().decode()
        h = r.headers
    csp = h["Content-Security-Policy"]
    assert csp, "no Content-Security-Policy"
    directives = dict((d.strip().split(" ", 1) + [""])[:2] for d in csp.split(";"))
    assert directives["default-src"] == "'none'", csp
    for d in ("script-src", "style-src", "connect-src"):
        assert directives[d] == "'self'", f"{d} must be 'self' only: {csp}"
    # blob: for a run's image outputs, fetched with the key and shown through an object URL.
    assert directives["img-src"] == "'self' blob:", csp
    assert directives.get("frame-ancestors") == "'none'" and directives.get("base-uri") == "'none'", csp
    assert "unsafe" not in csp and "http" not in csp and "*" not in csp, csp
    assert h["X-Content-Type-Options"] == "nosniff"
    assert h["Referrer-Policy"] == "no-referrer"
    assert h["Cache-Control"] == "no-cache" and re.fullmatch(r'"[0-9a-f]{16}"', h["ETag"]), dict(h)
    assert h["Content-Type"].startswith("text/html")
    assert not re.search(r"<script(?![^>]*\bsrc=)", html), "an inline script in index.html"
    assert not re.search(r"\son[a-z]+\s*=", html), "an event handler attribute in index.html"
    assert not re.search(r"\sstyle\s*=|<style", html), "an inline style in index.html"
    for src in re.findall(r'(?:src|href)="([^"]+)"', html):
        assert src.startswith("/") or src.startswith("#"), f"another origin in index.html: {src}"
    # Revalidation: the same ETag gives 304 without a body.
    req = urllib.request.Request(SERVER + "/assets/app.js", headers={"If-None-Match": h["ETag"]})
    with urllib.request.urlopen(req) as r:
        js_etag = r.headers["ETag"]
        assert r.headers["Content-Type"].startswith("text/javascript")
        assert r.headers["Content-Security-Policy"] == csp
    try:
        urllib.request.urlopen(urllib.request.Request(SERVER + "/assets/app.js",
                                                      headers={"If-None-Match": js_etag}))
        raise AssertionError("no 304 for a matching ETag")
    except urllib.error.HTTPError as e:
        assert e.code == 304, e.code
    # The libraries come from the Debian packages, served from this origin.
    for name, marker in (("marked.min.js", "marked"), ("purify.min.js", "DOMPurify")):
        with urllib.request.urlopen(SERVER + "/assets/" + name) as r:
            assert marker in r.read().decode(), name
    # Every page path is the same shell; unknown assets are 404 with the same headers.
    for path in ("/runs", "/runs/run_0123456789abcdef0123456789abcdef", "/keys"):
        with urllib.request.urlopen(SERVER + path) as r:
            assert r.headers["ETag"] == h["ETag"], path
    for path, code in (("/assets/nope.js", 404), ("/assets/.hidden", 404), ("/nope", 404)):
        try:
            urllib.request.urlopen(SERVER + path)
            raise AssertionError(f"{path} answered 200")
        except urllib.error.HTTPError as e:
            assert e.code == code, (path, e.code)
            if path.startswith("/assets"):
                assert e.headers["Content-Security-Policy"] == csp
                assert e.headers["X-Content-Type-Options"] == "nosniff"
    try:
        urllib.request.urlopen(urllib.request.Request(SERVER + "/", data=b"x", method="POST"))
        raise AssertionError("POST / answered 200")
    except urllib.error.HTTPError as e:
        assert e.code == 405, e.code


@test()
def playground_shows_the_seed_and_its_curl(b):
    """The seed pre-filled; request.json and curl follow every edit."""
    use_key(b, MEMBER_KEY)
    b.find("#pg-reset").click()
    b.wait_js("the form", "return !!document.getElementById('pg-prompt')")
    assert b.find("#pg-prompt").prop("value") == SEED["prompt"]
    body = b.find("#request-json").text
    assert json.loads(body) == SEED and list(json.loads(body)) == list(SEED), body
    curl = b.find("#curl").text
    for line in ("curl -X POST $EPHEMERAL_URL/v1/runs", '-H "Authorization: Bearer $EPHEMERAL_API_KEY"',
                 '-H "Content-Type: application/json"', '-H "Idempotency-Key: $(uuidgen)"'):
        assert line in curl, f"{line!r} not in the curl command: {curl}"
    assert "-d '" in curl and '"max_cost_micros":40000' in curl, curl
    assert MEMBER_KEY not in b.js("return document.body.innerText"), "the key is shown"
    shot(b, "01-playground-seed")

    fill(b, "#pg-budget", "0.05")
    b.wait_js("the JSON to follow the budget",
              "return JSON.parse(document.getElementById('request-json').textContent).max_cost_micros === 50000")
    assert '"max_cost_micros":50000' in b.find("#curl").text
    b.find("label.toggle:has(#pg-web)").click()
    b.wait_js("the allow-list field", "return !document.getElementById('pg-allow').closest('.field').hidden")
    b.find("#pg-allow").send_keys("example.com\n*.example.org")
    b.wait_js("the JSON to follow the web toggle",
              "const w = JSON.parse(document.getElementById('request-json').textContent).web;"
              "return w && w.allow && w.allow.join() === 'example.com,*.example.org'")
    assert '"web":{"allow":["example.com","*.example.org"]}' in b.find("#curl").text
    b.find("label.toggle:has(#pg-zdr)").click()
    b.wait_js("zero data retention in the JSON",
              "return JSON.parse(document.getElementById('request-json').textContent).zero_data_retention === true")
    shot(b, "02-playground-edited")
    b.find("#pg-reset").click()
    b.wait_js("the seed again",
              "return JSON.parse(document.getElementById('request-json').textContent).max_cost_micros === 40000")


@test()
def run_from_the_playground_streams_live(b):
    """Run switches to the run's view; the timeline grows live to 'Worker destroyed'."""
    use_key(b, MEMBER_KEY)
    b.find("#pg-reset").click()
    b.wait_js("the form", "return !!document.getElementById('pg-prompt')")
    fill(b, "#pg-prompt", SPACED_PROMPT)
    b.find("#pg-run").click()
    url = b.wait("the run's page", lambda: re.search(r"/runs/(run_[0-9a-f]{32})$", b.url))
    run_id = url.group(1)
    ctx.runs["spaced"] = run_id
    # Live: a command is on the page while the run is still going (the fixture's commands are a
    # second apart, so the run cannot have ended when its first command shows).
    live = b.wait_js("a command while the run is live",
                     "const r = document.querySelector('#timeline-body tr[data-type=\"shell.command\"]');"
                     "const s = document.getElementById('run-status').textContent;"
                     "return r ? {status: s, live: document.getElementById('live-state').textContent} : null")
    assert live["status"] in ("Running", "Starting", "Queued"), live
    assert "live" in live["live"], live
    shot(b, "03-run-live")
    where = ("return ['#cost', '#timeline-body tr', '.side', '.runhead h1', '#tl-title']"
             ".map(s => Math.round(document.querySelector(s).getBoundingClientRect().top))")
    before = b.js(where)
    msg = wait_destroyed(b)
    assert re.fullmatch(r"\$[0-9.]+ charged, \$[0-9.]+ released", msg), msg
    run = finished(run_id)
    b.wait_js("the final status", "return document.getElementById('run-status').textContent === 'Completed'")
    c = run["cost"]
    line = b.wait_js("the cost line", "return document.getElementById('cost-line').textContent")
    # Each amount rounded once from the same totals: compute is the shown charge less the shown
    # model and web parts, released the shown budget less the shown charge.
    shown_m = lambda m: (m // 10 + (1 if m % 10 >= 5 else 0)) * 10
    compute = shown_m(c["charged_micros"]) - shown_m(c["model_micros"]) - shown_m(c["web_micros"])
    assert line == f"Model {money(c['model_micros'])} · Web {money(c['web_micros'])} · Compute {money(compute)}", line
    segs = b.js("return [...document.querySelectorAll('#cost .bar .seg')].map(s => s.className)")
    assert segs == ["seg model", "seg web", "seg compute"], segs
    legend = b.find("#cost .legend").text
    released = shown_m(c["reserved_micros"]) - shown_m(c["charged_micros"])
    assert f"Released {money(released)}" in legend, legend
    summary = b.find("#run-summary").text
    assert summary.startswith(f"{money(c['charged_micros'])} of {money(c['reserved_micros'])}"), summary
    result = b.wait_js("the result", "return document.getElementById('result').textContent")
    assert "Counted: one, two, three." in result, result
    # No layout shift while it streamed and settled: what was on the screen has not moved.
    assert b.js(where) == before, (before, b.js(where))
    # Every event once, in order, as the API has them.
    rows = timeline(b)
    api_events = events_of(run_id)
    assert [r["seq"] for r in rows] == [e["seq"] for e in api_events], (rows, api_events)
    assert all(abs(float(r["t"]) - e["t"]) < 0.006 for r, e in zip(rows, api_events)), rows
    # A shell command opens to its output.
    b.find("#timeline-body tr[data-type='shell.command'] summary").click()
    out = b.wait_js("the command's output",
                    "const d = document.querySelector('#timeline-body tr[data-type=\"shell.command\"] details');"
                    "return d.open ? d.textContent : null")
    assert "one" in out and "exit 0" in out, out
    shot(b, "04-run-finished")


@test()
def the_seed_example_end_to_end(b):
    """The seed run from the playground: the seed's timeline shape, its result, its cost."""
    use_key(b, MEMBER_KEY)
    b.find("#pg-reset").click()
    b.wait_js("the form", "return !!document.getElementById('pg-prompt')")
    b.find("#pg-run").click()
    run_id = b.wait("the run's page", lambda: re.search(r"/runs/(run_[0-9a-f]{32})$", b.url)).group(1)
    ctx.runs["seed"] = run_id
    wait_destroyed(b)
    b.wait_js("the result", "return document.getElementById('result').textContent.includes('Prime script output')")
    rows = timeline(b)
    labels = [r["src"] for r in rows if r["type"] not in ("model.call", "shell.output")]
    box = labels[1]
    assert box in ("Sandbox", "gVisor", "MicroVM"), labels
    assert labels == ["Queued", box, box, "Shell", "Shell", "Shell", "Shell", box, "Completed",
                      "Worker destroyed"], labels
    assert rows[0]["msg"] == "budget of $0.04 reserved", rows[0]
    result = b.find("#result").text
    assert "2 3 5 7 11 13 17 19 23 29 31 37 41 43 47" in result, result
    assert "Could not resolve host" in result, result
    perms = b.js("return [...document.querySelectorAll('#perms tr')].map(r => r.textContent)")
    assert "WebOff" in perms and "ShellOn, inside the sealed machine" in perms, perms
    assert "Budget$0.04, hard limit" in perms and "Time limit120 seconds" in perms, perms
    shot(b, "05-seed-run")


@test()
def files_are_sent_inline(b):
    """Chosen and dropped files go inline: text as content, binary as content_base64."""
    text_path = os.path.join(TMP, "notes.txt")
    bin_path = os.path.join(TMP, "blob.bin")
    with open(text_path, "w") as f:
        f.write("hello from the browser\n")
    with open(bin_path, "wb") as f:
        f.write(bytes([0, 255, 1, 254]))
    use_key(b, MEMBER_KEY)
    b.find("#pg-reset").click()
    b.wait_js("the form", "return !!document.getElementById('pg-prompt')")
    fill(b, "#pg-prompt", XSS_PROMPT)
    b.find("#pg-files").send_keys(text_path + "\n" + bin_path)
    b.js("""const dt = new DataTransfer();
            dt.items.add(new File(['dropped text'], 'dropped.txt', {type: 'text/plain'}));
            document.querySelector('.drop').dispatchEvent(new DragEvent('drop', {dataTransfer: dt, bubbles: true}));""")
    files = b.wait_js("three files in the JSON",
                      "const f = JSON.parse(document.getElementById('request-json').textContent).files;"
                      "return f && f.length === 3 ? f : null")
    by = {f["path"]: f for f in files}
    assert by["notes.txt"] == {"path": "notes.txt", "content": "hello from the browser\n"}, by
    assert by["blob.bin"] == {"path": "blob.bin", "content_base64": "AP8B/g=="}, by
    assert by["dropped.txt"] == {"path": "dropped.txt", "content": "dropped text"}, by
    shot(b, "05b-playground-files")
    b.find("#pg-run").click()
    run_id = b.wait("the run's page", lambda: re.search(r"/runs/(run_[0-9a-f]{32})$", b.url)).group(1)
    row = b.wait_js("the files in the permissions table",
                    "const r = [...document.querySelectorAll('#perms tr')].find(r => r.textContent.startsWith('Files'));"
                    "return r && r.textContent.includes('blob.bin') ? r.textContent : null")
    assert all(n in row for n in ("notes.txt", "blob.bin", "dropped.txt")), row
    st, run = api("GET", f"/v1/runs/{run_id}", MEMBER_KEY)
    assert sorted(run["permissions"]["files"]) == ["blob.bin", "dropped.txt", "notes.txt"], run
    wait_destroyed(b)


@test()
def zero_data_retention_result_is_shown_once(b):
    """A ZDR run's result reaches the page that follows it (the stream), and is kept nowhere."""
    use_key(b, MEMBER_KEY)
    b.find("#pg-reset").click()
    b.wait_js("the form", "return !!document.getElementById('pg-prompt')")
    fill(b, "#pg-prompt", SPACED_PROMPT)
    b.find("label.toggle:has(#pg-zdr)").click()
    b.wait_js("zero data retention in the JSON",
              "return JSON.parse(document.getElementById('request-json').textContent).zero_data_retention === true")
    b.find("#pg-run").click()
    run_id = b.wait("the run's page", lambda: re.search(r"/runs/(run_[0-9a-f]{32})$", b.url)).group(1)
    wait_destroyed(b)
    shown = b.wait_js("the result from the stream",
                      "const t = document.getElementById('result').textContent; return t.includes('Counted') && t")
    assert "Counted: one, two, three." in shown, shown
    run = finished(run_id)
    assert run["result"] is None and run["permissions"]["zero_data_retention"], run
    shot(b, "05c-zdr-result")
    # Opened again, the page says the result was not kept.
    open_run(b, run_id, settled=True)
    text = b.wait_js("the ZDR note", "const t = document.getElementById('result').textContent;"
                     "return t.includes('not kept') && t")
    assert "Counted" not in text, text


@test()
def replay_keeps_the_original_timing(b):
    """Replay at x1 and x4: the events in their order and spacing, scaled; pause; jump."""
    run_id = ctx.runs.get("spaced") or new_run(SPACED_PROMPT)
    finished(run_id)
    open_run(b, run_id, settled=True)
    wait_destroyed(b)
    b.wait_js("the replay control", "return document.getElementById('replay').dataset.state === 'ready'")
    evs = events_of(run_id)
    shells = [e for e in evs if e["type"] == "shell.command"]
    assert len(shells) == 3 and shells[2]["t"] - shells[0]["t"] > 1.5, shells

    def play(speed):
        b.find(f"#replay [data-speed='{speed}']").click()
        b.js("""
            window.__shown = {};
            const body = document.getElementById('timeline-body');
            window.__obs && window.__obs.disconnect();
            window.__obs = new MutationObserver((list) => {
              const now = performance.now();
              for (const m of list) {
                const r = m.target;
                if (m.attributeName === 'hidden' && !r.hidden && !(r.dataset.seq in window.__shown))
                  window.__shown[r.dataset.seq] = now;
              }
            });
            window.__obs.observe(body, {subtree: true, attributes: true, attributeFilter: ['hidden']});
            // How late this page's own timers fire meanwhile (a loaded machine starves the
            // browser): the replay's timers cannot be asked to be more punctual than that.
            window.__lag = 0;
            let tick = performance.now();
            clearInterval(window.__lagTimer);
            window.__lagTimer = setInterval(() => {
              const now = performance.now();
              window.__lag = Math.max(window.__lag, now - tick - 50);
              tick = now;
            }, 50);
            window.__start = performance.now();
            document.getElementById('replay-play').click();
        """)
        b.wait_js("the replay to end", "return document.getElementById('replay').dataset.state === 'ended'",
                  timeout=30)
        shown = b.js("clearInterval(window.__lagTimer);"
                     "return {start: window.__start, shown: window.__shown, lag: window.__lag}")
        lag = max(0.0, shown["lag"]) / 1000
        return {int(k): (v - shown["start"]) / 1000 for k, v in shown["shown"].items()}, lag

    for speed in (1, 4):
        seen, lag = play(speed)
        order = sorted(seen, key=lambda s: (seen[s], s))
        later = [e["seq"] for e in evs if e["t"] > 0.05]
        assert [s for s in order if s in later] == later, f"order at x{speed}: {order}"
        for e in shells:
            expected = e["t"] / speed
            got = seen[e["seq"]]
            # Early by at most the tolerance; late by at most that plus the page's own timer lag.
            assert -max(0.3, 0.15 * expected) <= got - expected <= max(0.3, 0.15 * expected) + lag, \
                f"x{speed}: event {e['seq']} at {got:.2f} s, expected {expected:.2f} s (timer lag {lag:.2f} s)"
        gap = seen[shells[2]["seq"]] - seen[shells[0]["seq"]]
        want = (shells[2]["t"] - shells[0]["t"]) / speed
        assert abs(gap - want) <= max(0.25, 0.15 * want) + lag, \
            f"x{speed}: spacing {gap:.2f} s, want {want:.2f} (timer lag {lag:.2f} s)"
        shot(b, f"06-replay-x{speed}-ended")

    # Pause holds the clock; Resume goes on to the end.
    b.find("#replay [data-speed='1']").click()
    b.find("#replay-play").click()
    b.wait_js("the first command in the replay",
              f"return !document.querySelector('#timeline-body tr[data-seq=\"{shells[0]['seq']}\"]').hidden")
    b.find("#replay-play").click()
    assert b.js("return document.getElementById('replay').dataset.state") == "paused"
    clock = b.find("#replay-clock").text
    time.sleep(0.6)  # the clock must not move while paused: observe it over a while
    assert b.find("#replay-clock").text == clock, "the clock moved while paused"
    shot(b, "07-replay-paused")
    # Jump: between the first and the second command, exactly the events up to there are shown.
    pos = (shells[0]["t"] + shells[1]["t"]) / 2
    b.js("const r = document.getElementById('replay-pos'); r.value = String(Math.round(arguments[0] * 100));"
         "r.dispatchEvent(new Event('input'))", pos)
    rows = timeline(b)
    visible = [r["seq"] for r in rows if not r["hidden"]]
    p = round(pos * 100) / 100
    want = [e["seq"] for e in evs if e["t"] <= p + 1e-9]
    assert visible == want, (visible, want)
    b.find("#replay-play").click()
    b.wait_js("the replay to end", "return document.getElementById('replay').dataset.state === 'ended'")
    assert all(not r["hidden"] for r in timeline(b))


def replay_of(run_id):
    """A replay (replay_of) of a finished run, finished: (its id, its run object, its events)."""
    st, rep = api("POST", "/v1/runs", MEMBER_KEY, {"replay_of": run_id, "max_cost_micros": 30000})
    assert st == 201, f"replay_of {run_id}: {st} {rep}"
    run = finished(rep["id"])
    assert run["status"] == "completed", run
    return rep["id"], run, events_of(rep["id"])


def badges(b):
    """Every badge in the timeline, with its row: what the page marks, whatever the event."""
    return b.js("return [...document.querySelectorAll('#timeline-body .badge')].map(x => {"
                "const r = x.closest('tr'); const box = x.getBoundingClientRect();"
                "return {seq: Number(r.dataset.seq), type: r.dataset.type, badge: x.textContent,"
                "src: r.querySelector('.src').textContent, msg: r.querySelector('.msg').textContent,"
                "shown: !r.hidden && box.width > 0 && box.height > 0}})")


def replay_header(b):
    """The run header's replay part, once the run is drawn: {text, href}, or None."""
    b.wait_js("the run's header line", "return document.getElementById('run-meta').textContent.length > 0")
    return b.js("const s = document.getElementById('run-replay');"
                "return s && {text: s.textContent, href: s.querySelector('a')?.getAttribute('href')}")


@test()
def a_replay_marks_its_divergences(b):
    """A replay of a run that read /dev/urandom: that command's divergence is marked "diverged"
    with the server's message, the header names the original and counts 1 divergence; the
    original itself is no replay. A replay of a run that gives the same results has no badge."""
    orig = new_run(DIVERGE_PROMPT)
    assert finished(orig)["status"] == "completed"
    rep, run, evs = replay_of(orig)
    divs = [e for e in evs if e["type"] == "replay.divergence"]
    # What the page is to show, as the server has it: only the random bytes differ.
    assert run["replay"] == {"of": orig, "divergences": 1}, run["replay"]
    assert [d["data"]["call_id"] for d in divs] == ["call_2"], divs
    assert len([e for e in evs if e["type"] == "shell.command"]) == 2, evs
    open_run(b, rep, settled=True)
    wait_destroyed(b)
    assert [r["seq"] for r in timeline(b)] == [e["seq"] for e in evs], (timeline(b), evs)
    # The divergence's row, and only it, carries the badge, with the server's message beside it.
    d = divs[0]
    assert badges(b) == [{"seq": d["seq"], "type": "replay.divergence", "badge": "diverged",
                          "src": "Divergence", "msg": f"diverged {d['message']}", "shown": True}], badges(b)
    assert d["message"] == "divergence in shell (turn 2)", d
    head = replay_header(b)
    assert head == {"text": f"replay of {orig}, 1 divergence", "href": f"/runs/{orig}"}, head
    shot(b, "07b-replay-diverged")
    # The header's link opens the original, which is no replay and has nothing marked.
    b.find("#run-replay a").click()
    b.wait("the original's page", lambda: b.url.endswith(f"/runs/{orig}"))
    b.wait_js("the original's timeline", "return document.getElementById('live-state').dataset.state === 'done'"
              " && document.querySelector('code.runid').textContent === arguments[0]", orig)
    assert replay_header(b) is None, replay_header(b)
    assert badges(b) == [], badges(b)

    # The same commands, the same results: nothing marked, and the header says 0 divergences.
    spaced = ctx.runs.get("spaced") or new_run(SPACED_PROMPT)
    finished(spaced)
    rep, run, evs = replay_of(spaced)
    assert run["replay"] == {"of": spaced, "divergences": 0}, run["replay"]
    assert not [e for e in evs if e["type"] == "replay.divergence"], evs
    assert len([e for e in evs if e["type"] == "shell.command"]) == 3, evs
    open_run(b, rep, settled=True)
    wait_destroyed(b)
    assert [r["seq"] for r in timeline(b)] == [e["seq"] for e in evs], (timeline(b), evs)
    assert badges(b) == [], badges(b)
    head = replay_header(b)
    assert head == {"text": f"replay of {spaced}, 0 divergences", "href": f"/runs/{spaced}"}, head
    shot(b, "07c-replay-no-divergence")


@test(allow=[r"/events - Failed to load resource: net::ERR_(INCOMPLETE_CHUNKED_ENCODING|EMPTY_RESPONSE|CONNECTION_RESET)"])
def reconnects_without_losing_or_doubling(b):
    """A network drop mid-run: the page resumes with Last-Event-ID; every event exactly once."""
    # The slow fixture blocks in a 60 s command: the run is surely live during the drop, and its
    # remaining events (cancelled, destroyed) come after it.
    run_id = new_run(SLOW_PROMPT, 50000)
    open_run(b, run_id)
    before = b.wait_js("the model's call before the drop",
                       "const rows = [...document.querySelectorAll('#timeline-body tr')];"
                       "return rows.some(r => r.dataset.type === 'model.call') ?"
                       " rows.map(r => Number(r.dataset.seq)) : null")
    n = ctx.proxy.cut()
    assert n > 0, "no connection to cut"
    resumed = lambda: [r for r in ctx.proxy.seen("GET", f"/v1/runs/{run_id}/events") if "last-event-id" in r[2]]
    b.wait("the page to resume the stream", resumed)
    b.wait_js("the page to say it is live again", "return document.getElementById('live-state').dataset.state === 'live'")
    cancel(run_id)
    wait_destroyed(b)
    rows = timeline(b)
    api_seqs = [e["seq"] for e in events_of(run_id)]
    assert [r["seq"] for r in rows] == api_seqs, ([r["seq"] for r in rows], api_seqs)
    first = resumed()[0]
    assert int(first[2]["last-event-id"]) >= max(before), (first, before)
    shot(b, "08-reconnected")


@test()
def cancel_a_running_run(b):
    run_id = new_run(SLOW_PROMPT, 50000)
    open_run(b, run_id)
    b.wait_js("the long command to start",
              "return document.querySelector('#timeline-body tr[data-type=\"worker.started\"]')")
    b.wait_js("the Cancel button", "return !document.getElementById('cancel').hidden")
    b.find("#cancel").click()
    b.wait_js("the cancelled status", "return document.getElementById('run-status').textContent === 'Cancelled'",
              timeout=30)
    wait_destroyed(b, timeout=30)
    b.wait_js("the Cancel button to go", "return document.getElementById('cancel').hidden")
    shot(b, "09-cancelled")


@test()
def the_result_is_sanitised(b):
    """<script>, <img onerror>, javascript: links and remote images stay inert text."""
    run_id = new_run(XSS_PROMPT, 20000)
    run = finished(run_id)
    assert "<script>" in run["result"], run["result"]
    b.get(ctx.url + "/")
    b.js("window.__xss = undefined")
    open_run(b, run_id, settled=True)
    b.wait_js("the result", "return document.getElementById('result').textContent.includes('Hostile result')")
    r = b.js("""
        const el = document.getElementById('result');
        return {
          xss: window.__xss === undefined ? null : window.__xss,
          text: el.textContent,
          tags: [...el.querySelectorAll('script, img, iframe, object, embed, svg, style, form')].map(x => x.tagName),
          handlers: [...el.querySelectorAll('*')].flatMap(x => [...x.attributes].map(a => a.name)).filter(n => n.startsWith('on')),
          hrefs: [...el.querySelectorAll('a')].map(a => a.getAttribute('href')),
          strong: el.querySelectorAll('strong').length,
        };""")
    assert r["xss"] is None, r
    assert not r["tags"] and not r["handlers"], r
    assert all(h is None or not h.strip().lower().startswith("javascript:") for h in r["hrefs"]), r
    assert "<script>window.__xss = 1</script>" in r["text"], r["text"]
    assert 'onerror="window.__xss = 2"' in r["text"], r["text"]
    assert "http://127.0.0.2/tracker.png" in r["text"], r["text"]
    assert r["strong"] >= 1, "Markdown was not rendered"
    for a in b.find_all("#result a"):
        a.click()
    assert b.js("return window.__xss === undefined"), "a link ran code"
    assert re.search(r"/runs/run_", b.url), b.url
    shot(b, "10-sanitised-result")


@test(allow=[HTTP_4XX])
def api_errors_are_shown_in_words(b):
    """No key: no request. A wrong key, a 402 and a 400: the server's message on the page."""
    b.get(ctx.url + "/")
    b.js("sessionStorage.clear()")
    b.get(ctx.url + "/")
    b.wait_js("the form", "return !!document.getElementById('pg-run')")
    posts = len(ctx.proxy.seen("POST", "/v1/runs"))
    b.find("#pg-run").click()
    b.wait_js("the key dialog", "return document.getElementById('key-dialog').open")
    assert "No API key" in b.find("#pg-error").prop("textContent")
    assert len(ctx.proxy.seen("POST", "/v1/runs")) == posts, "a request was sent without a key"
    # A wrong key, in the dialog.
    b.find("#key-input").send_keys("eph_" + "x" * 40)
    b.find("#key-form button[type=submit]").click()
    err = b.wait_js("the 401 message", "const e = document.getElementById('key-error');"
                    "return !e.hidden && e.textContent.startsWith('The server refused') && e.textContent")
    st, body = api("GET", "/v1/balance", "eph_" + "x" * 40)
    assert st == 401 and body["error"]["message"] in err, (err, body)
    assert err.startswith("The server refused the API key"), err
    shot(b, "11-error-401")
    b.find("#key-cancel").click()
    # 402 and 400: the same body sent straight to the API gives the message the page shows.
    use_key(b, MEMBER_KEY)
    for field, value, code, name in (("#pg-budget", "1000000", 402, "12-error-402"),
                                     ("#pg-timeout", "99999", 400, "13-error-400")):
        b.find("#pg-reset").click()
        b.wait_js("the form", "return !!document.getElementById('pg-run')")
        fill(b, field, value)
        body = json.loads(b.find("#request-json").text)
        st, ans = api("POST", "/v1/runs", MEMBER_KEY, body)
        assert st == code, (st, ans)
        b.find("#pg-run").click()
        shown = b.wait_js(f"the {code} message",
                          "const e = document.getElementById('pg-error'); return !e.hidden && e.textContent")
        assert ans["error"]["message"] in shown, (shown, ans)
        assert f"({ans['error']['param']})" in shown, shown
        assert re.search(r"/$", b.url), "the page left the playground on an error"
        shot(b, name)
    # A key revoked while the page holds it: the header says so.
    st, k = api("POST", "/v1/keys", ADMIN_KEY, {"role": "member"})
    assert st == 201, k
    use_key(b, k["key"])
    st, _ = api("DELETE", f"/v1/keys/{k['id']}", ADMIN_KEY)
    assert st == 200
    b.find("#pg-reset").click()
    b.wait_js("the form", "return !!document.getElementById('pg-run')")
    b.find("#pg-run").click()
    shown = b.wait_js("the 401 message", "const e = document.getElementById('pg-error'); return !e.hidden && e.textContent")
    assert shown.startswith("The server refused the API key: invalid api key"), shown
    b.get(ctx.url + "/runs/run_0123456789abcdef0123456789abcdef")
    shown = b.wait_js("the 401 message", "const e = document.getElementById('run-error'); return !e.hidden && e.textContent")
    assert shown.startswith("The server refused the API key"), shown
    use_key(b, MEMBER_KEY)
    b.get(ctx.url + "/runs/run_0123456789abcdef0123456789abcdef")
    shown = b.wait_js("the 404 message", "const e = document.getElementById('run-error'); return !e.hidden && e.textContent")
    assert shown.startswith("Not found"), shown
    b.js("sessionStorage.clear()")


@test()
def keyboard_alone(b):
    """Tab through the playground to Run (every stop labelled, focus visible), Enter runs."""
    use_key(b, MEMBER_KEY)
    b.find("#pg-reset").click()
    b.get(ctx.url + "/")
    b.wait_js("the form", "return !!document.getElementById('pg-run')")
    b.js("document.activeElement && document.activeElement.blur(); window.scrollTo(0, 0)")
    stops = []
    for _ in range(80):
        b.keys(KEYS["TAB"])
        f = b.js("""
            const el = document.activeElement;
            if (!el || el === document.body) return null;
            const cs = getComputedStyle(el);
            let name = el.getAttribute('aria-label') || '';
            if (!name && el.getAttribute('aria-labelledby'))
              name = el.getAttribute('aria-labelledby').split(' ').map(i => document.getElementById(i)?.textContent || '').join(' ');
            if (!name && el.labels && el.labels.length) name = el.labels[0].textContent;
            if (!name && !['INPUT', 'TEXTAREA', 'SELECT'].includes(el.tagName)) name = el.textContent;
            return {id: el.id, tag: el.tagName, name: name.trim(),
                    outline: cs.outlineStyle !== 'none' && parseFloat(cs.outlineWidth) >= 2};""")
        assert f, "the focus left the page"
        stops.append(f)
        assert f["name"], f"a control without a label: {f}"
        assert f["outline"], f"no visible focus on {f}"
        if f["id"] == "pg-run":
            break
    else:
        raise AssertionError(f"Run never got the focus: {stops}")
    ids = [s["id"] for s in stops]
    for want in ("pg-prompt", "pg-shell", "pg-web", "pg-timeout", "pg-budget", "pg-run"):
        assert want in ids, f"{want} not reached by Tab: {ids}"
    shot(b, "14-keyboard-focus-on-run", full=False)
    b.keys(KEYS["ENTER"])
    run_id = b.wait("Enter to start the run", lambda: re.search(r"/runs/(run_[0-9a-f]{32})$", b.url)).group(1)
    wait_destroyed(b)
    ctx.runs["keyboard"] = run_id


@test()
def phone_sized_run_view(b):
    """390 x 844: the run view fits the width; screenshots of the viewport and the page."""
    run_id = ctx.runs.get("seed") or ctx.runs.get("keyboard") or new_run(SEED["prompt"], 40000)
    finished(run_id)
    b.viewport(390, 844, mobile=True)
    try:
        open_run(b, run_id)
        wait_destroyed(b)
        b.wait_js("the result", "return document.getElementById('result').textContent.length > 40")
        width = b.js("return document.documentElement.scrollWidth")
        assert width <= 390, f"the page is {width} px wide on a 390 px screen"
        shot(b, "15-run-390x844", full=False)
        shot(b, "16-run-390-full")
        b.get(ctx.url + "/")
        b.wait_js("the form", "return !!document.getElementById('pg-run')")
        assert b.js("return document.documentElement.scrollWidth") <= 390
        shot(b, "17-playground-390-full")
    finally:
        b.reset_viewport()


@test()
def runs_list_pages_and_filters(b):
    """Newest first, paged with the API's cursor, filtered by status."""
    use_key(b, MEMBER_KEY)
    st, first = api("GET", "/v1/runs?limit=2", MEMBER_KEY)
    assert st == 200 and first["has_more"], "the test needs more than 2 runs"
    b.get(ctx.url + "/runs?limit=2")
    ids = b.wait_js("the first page", "const r = [...document.querySelectorAll('#runs-body tr[data-id]')];"
                    "return r.length ? r.map(x => x.dataset.id) : null")
    assert ids == [r["id"] for r in first["data"]], (ids, first)
    shot(b, "18-runs-page-1")
    b.find("#older").click()
    st, second = api("GET", f"/v1/runs?limit=2&after={first['data'][-1]['id']}", MEMBER_KEY)
    ids2 = b.wait_js("the second page", "const r = [...document.querySelectorAll('#runs-body tr[data-id]')];"
                     "return r.length && !r.some(x => arguments[0].includes(x.dataset.id)) ? r.map(x => x.dataset.id) : null",
                     ids)
    assert ids2 == [r["id"] for r in second["data"]], (ids2, second)
    b.find("#newer").click()
    back = b.wait_js("the first page again", "const r = [...document.querySelectorAll('#runs-body tr[data-id]')];"
                     "return r.length && r[0].dataset.id === arguments[0] ? r.map(x => x.dataset.id) : null",
                     ids[0])
    assert back == ids
    # The status filter.
    b.get(ctx.url + "/runs")
    b.wait_js("the list", "return document.querySelectorAll('#runs-body tr[data-id]').length > 0")
    b.js("const s = document.getElementById('status-filter'); s.value = 'cancelled';"
         "s.dispatchEvent(new Event('change'))")
    b.wait("the filtered URL", lambda: "status=cancelled" in b.url)
    st, cancelled = api("GET", "/v1/runs?status=cancelled", MEMBER_KEY)
    got = b.wait_js("the filtered list", "const r = [...document.querySelectorAll('#runs-body tr[data-id]')];"
                    "return r.length ? r.map(x => [x.dataset.id, x.querySelector('.pill').textContent]) : null")
    assert [g[0] for g in got] == [r["id"] for r in cancelled["data"]], (got, cancelled)
    assert all(g[1] == "Cancelled" for g in got), got
    row = b.js("return document.querySelector('#runs-body tr[data-id]').textContent")
    assert "$" in row and "openai/gpt-6-luna" in row, row
    shot(b, "19-runs-filtered")


@test(allow=[r"/v1/keys - Failed to load resource: the server responded with a status of 403"])
def header_balance_and_admin_names_only(b):
    """The balance in the header; an admin sees keys and connections by name, never a value."""
    canary = "webui-secret-canary-7f3a"
    st, c = api("POST", "/v1/connections", ADMIN_KEY,
                {"name": "webui-demo", "base_url": "https://api.example.com", "methods": ["GET"],
                 "headers": {"Authorization": f"Bearer {canary}"}})
    assert st == 201, c
    use_key(b, ADMIN_KEY)
    st, bal = api("GET", "/v1/balance", ADMIN_KEY)
    text = b.wait_js("the balance", "return document.getElementById('balance').textContent")
    assert text == f"Balance {money(bal['available_micros'])}", (text, bal)
    b.find("#nav-admin").click()
    b.wait_js("the keys", "return document.querySelectorAll('#keys-body tr').length > 0")
    b.wait_js("the connections", "return document.getElementById('connections-body').textContent.includes('webui-demo')")
    page = b.js("return document.body.innerText")
    st, keys = api("GET", "/v1/keys", ADMIN_KEY)
    for k in keys["data"]:
        assert k["id"] in page, k
    assert "Authorization" in page
    assert canary not in page and ADMIN_KEY not in page and MEMBER_KEY not in page
    assert not re.search(r"eph_[A-Za-z0-9]{40}", page), "a key value is on the page"
    # The playground offers the org's connections by name.
    b.find("nav a[data-page='playground']").click()
    b.wait_js("the connection checkbox", "return !!document.querySelector('#pg-connections input[value=\"webui-demo\"]')")
    b.find("#pg-connections label.toggle").click()
    b.wait_js("the connection in the JSON", "const j = JSON.parse(document.getElementById('request-json').textContent);"
              "return j.connections && j.connections[0] === 'webui-demo'")
    b.find("#pg-connections label.toggle").click()
    b.find("nav a[data-page='keys']").click()
    b.wait_js("the connections", "return document.getElementById('connections-body').textContent.includes('webui-demo')")
    shot(b, "20-admin")
    # A member is told in words that the page needs an admin key, and sees no connection list.
    use_key(b, MEMBER_KEY)
    b.find("#nav-admin").click()
    shown = b.wait_js("the 403 message", "const e = document.getElementById('admin-error'); return !e.hidden && e.textContent")
    assert shown.startswith("This needs an admin key"), shown
    assert "webui-demo" not in b.js("return document.body.innerText")
    shot(b, "21-admin-as-member")
    b.find("nav a[data-page='playground']").click()
    b.wait_js("the connections field", "return !!document.getElementById('pg-conn-text')")


def admin_page(b):
    """The admin page with the admin key, its sections drawn."""
    use_key(b, ADMIN_KEY)
    b.find("#nav-admin").click()
    b.wait_js("the admin sections", "const s = document.getElementById('admin-sections');"
              "return s && !s.hidden && document.querySelectorAll('#keys-body tr').length > 0")


def page_holds(b, secret):
    """Whether secret is anywhere in the page: its text, its HTML or an input's value."""
    return b.js("const s = arguments[0];"
                "return document.documentElement.outerHTML.includes(s) || document.body.innerText.includes(s)"
                " || [...document.querySelectorAll('input, textarea')].some(i => i.value.includes(s))", secret)


def key_rows(b):
    return b.js("return [...document.querySelectorAll('#keys-body tr')].map(r => ({id: r.dataset.keyId,"
                "prefix: r.querySelector('.prefix').textContent, text: r.textContent,"
                "revoke: !r.querySelector('button').disabled}))")


@test(allow=[r"/v1/keys/key_[0-9a-f]+ - Failed to load resource: the server responded with a status of 404"])
def admin_creates_and_revokes_a_key(b):
    """A new key's value shown once with a copy button; its prefix in the list; revoked."""
    admin_page(b)
    before = {k["id"] for k in api("GET", "/v1/keys", ADMIN_KEY)[1]["data"]}
    # Every key by its prefix; this tab's own key marked; the last admin key cannot be revoked.
    rows = key_rows(b)
    mine = [r for r in rows if ADMIN_KEY[:8] in r["prefix"]]
    assert len(mine) == 1 and "this tab's key" in mine[0]["text"], rows
    st, keys = api("GET", "/v1/keys", ADMIN_KEY)
    assert [r["prefix"] for r in rows] == [f"{k['prefix']}…" for k in keys["data"]], (rows, keys)
    if sum(k["role"] == "admin" for k in keys["data"]) == 1:
        assert not mine[0]["revoke"], "the last admin key can be revoked from the page"
    b.js("const s = document.getElementById('key-role'); s.value = 'member'; s.dispatchEvent(new Event('change'))")
    b.find("#key-create").click()
    value = b.wait_js("the new key", "const e = document.getElementById('new-key-value'); return e && e.textContent")
    assert re.fullmatch(r"eph_[A-Za-z0-9_-]{20,}", value), value
    box = b.find("#new-key").text
    assert "will not be shown again" in box, box
    assert b.find("#new-key-copy").text == "Copy"
    st, keys = api("GET", "/v1/keys", ADMIN_KEY)
    new = [k for k in keys["data"] if k["id"] not in before]
    assert len(new) == 1 and new[0]["role"] == "member" and value.startswith(new[0]["prefix"]), (new, value)
    assert api("GET", "/v1/balance", value)[0] == 200, "the key shown does not work"
    b.wait_js("the new key in the list", "return !!document.querySelector(`#keys-body tr[data-key-id='${arguments[0]}']`)",
              new[0]["id"])
    row = b.js("return document.querySelector(`#keys-body tr[data-key-id='${arguments[0]}']`).textContent", new[0]["id"])
    assert f"{new[0]['prefix']}…" in row and value not in row, row
    shot(b, "22-admin-new-key")
    b.find("#new-key-done").click()
    b.wait_js("the value to go", "return document.getElementById('new-key').hidden")
    assert not page_holds(b, value), "the key's value stays in the page"
    # Revoke: a first press asks, the second revokes.
    btn = f"#keys-body tr[data-key-id='{new[0]['id']}'] button"
    b.find(btn).click()
    assert b.find(btn).text == "Confirm revoke"
    assert api("GET", "/v1/balance", value)[0] == 200, "revoked on the first press"
    b.find(btn).click()
    b.wait_js("the key to leave the list", "return !document.querySelector(`#keys-body tr[data-key-id='${arguments[0]}']`)",
              new[0]["id"])
    assert api("GET", "/v1/balance", value)[0] == 401, "the revoked key still works"
    # The server's refusal is shown: a key revoked elsewhere since the list was drawn.
    st, k = api("POST", "/v1/keys", ADMIN_KEY, {"role": "member"})
    assert st == 201
    b.find("#nav-admin").click()
    btn = f"#keys-body tr[data-key-id='{k['id']}'] button"
    b.wait_js("the other key", "return !!document.querySelector(arguments[0])", btn)
    assert api("DELETE", f"/v1/keys/{k['id']}", ADMIN_KEY)[0] == 200
    b.find(btn).click()
    b.find(btn).click()
    shown = b.wait_js("the 404 message", "const e = document.getElementById('keys-error'); return !e.hidden && e.textContent")
    st, ans = api("DELETE", f"/v1/keys/{k['id']}", ADMIN_KEY)
    assert st == 404 and shown.startswith("Not found") and ans["error"]["message"] in shown, (shown, ans)


@test(allow=[r"/v1/connections - Failed to load resource: the server responded with a status of 400"])
def admin_adds_and_deletes_a_connection(b):
    """A connection added from the page; its credentials never in the page afterwards; deleted."""
    header_secret = "webui-header-canary-51c2"
    query_secret = "webui-query-canary-9d0e"
    admin_page(b)
    b.wait_js("the connections", "return document.querySelectorAll('#connections-body tr').length > 0")
    # A refusal: the API's message next to the form, nothing added.
    fill(b, "#conn-name", "Not A Name")
    fill(b, "#conn-base", "https://api.example.com")
    b.find("#conn-add").click()
    shown = b.wait_js("the 400 message", "const e = document.getElementById('conn-error'); return !e.hidden && e.textContent")
    st, ans = api("POST", "/v1/connections", ADMIN_KEY, {"name": "Not A Name", "base_url": "https://api.example.com",
                                                         "methods": ["GET"]})
    assert st == 400 and ans["error"]["message"] in shown, (shown, ans)
    fill(b, "#conn-name", "webui-added")
    fill(b, "#conn-paths", "/v1, /v2")
    b.find("label.toggle:has(#conn-method-POST)").click()
    fill(b, "#conn-headers-name-1", "X-Api-Key")
    fill(b, "#conn-headers-value-1", header_secret)
    assert b.find("#conn-headers-value-1").prop("type") == "password"
    b.find("#conn-add-query").click()
    b.wait_js("a second query row", "return !!document.querySelector('#conn-query .pair:nth-child(2)')")
    b.js("document.querySelector('#conn-query .pair:nth-child(2) .pair-name').id = 'q2n';"
         "document.querySelector('#conn-query .pair:nth-child(2) .pair-value').id = 'q2v'")
    fill(b, "#q2n", "token")
    fill(b, "#q2v", query_secret)
    b.find("#conn-add").click()
    b.wait_js("the new connection", "return !!document.querySelector('#connections-body tr[data-connection=\"webui-added\"]')")
    st, c = api("GET", "/v1/connections/webui-added", ADMIN_KEY)
    assert st == 200, c
    assert c["methods"] == ["GET", "POST"] and c["path_prefixes"] == ["/v1", "/v2"], c
    assert c["header_names"] == ["X-Api-Key"] and c["query_names"] == ["token"], c
    row = b.js("return document.querySelector('#connections-body tr[data-connection=\"webui-added\"]').textContent")
    for part in ("https://api.example.com", "GET, POST", "/v1, /v2", "X-Api-Key", "token"):
        assert part in row, (part, row)
    for secret in (header_secret, query_secret):
        assert not page_holds(b, secret), f"a credential stays in the page: {secret}"
    assert b.find("#conn-name").prop("value") == "" and b.find("#conn-base").prop("value") == ""
    shot(b, "23-admin-connection-added")
    btn = "#connections-body tr[data-connection='webui-added'] button"
    b.find(btn).click()
    assert b.find(btn).text == "Confirm delete"
    b.find(btn).click()
    b.wait_js("the connection to go", "return !document.querySelector('#connections-body tr[data-connection=\"webui-added\"]')")
    assert api("GET", "/v1/connections/webui-added", ADMIN_KEY)[0] == 404, "not deleted"


@test(allow=[r"/v1/webhooks - Failed to load resource: the server responded with a status of 400"])
def admin_adds_a_webhook_and_sees_its_deliveries(b):
    """A webhook endpoint added from the page: a refused URL in the API's words; the secret shown
    once and gone from the page after; a run's delivery listed with its failed attempt (the
    endpoint is a closed loopback port); deleted."""
    admin_page(b)
    b.wait_js("the webhooks", "return document.querySelectorAll('#webhooks-body tr').length > 0")
    fill(b, "#webhook-url", "ftp://127.0.0.1:9/hook")
    b.find("#webhook-add").click()
    shown = b.wait_js("the 400 message", "const e = document.getElementById('webhook-error'); return !e.hidden && e.textContent")
    st, ans = api("POST", "/v1/webhooks", ADMIN_KEY, {"url": "ftp://127.0.0.1:9/hook"})
    assert st == 400 and ans["error"]["message"] in shown, (shown, ans)
    fill(b, "#webhook-url", "http://127.0.0.1:9/hook")
    for t in ("run.failed", "run.timed_out", "run.budget_exhausted", "run.cancelled", "sandbox.ended"):
        b.find(f"label.toggle:has([id='webhook-event-{t}'])").click()
    b.find("#webhook-add").click()
    secret = b.wait_js("the secret", "const e = document.getElementById('new-webhook-secret-value'); return e && e.textContent")
    assert re.fullmatch(r"whsec_[0-9a-f]{48}", secret), secret
    st, hooks = api("GET", "/v1/webhooks", ADMIN_KEY)
    assert st == 200 and len(hooks["data"]) == 1, hooks
    w = hooks["data"][0]
    assert w["url"] == "http://127.0.0.1:9/hook" and w["events"] == ["run.completed"], w
    assert secret not in json.dumps(hooks), "the secret listed"
    shot(b, "26-admin-webhook-secret")
    b.find("#new-webhook-secret-done").click()
    assert not page_holds(b, secret), "the secret stays in the page"
    run_id = new_run(SEED["prompt"])
    finished(run_id)
    row = f"#webhooks-body tr[data-webhook='{w['id']}']"
    b.wait_js("the endpoint's row", f"return !!document.querySelector(\"{row}\")")
    st, ds = api("GET", f"/v1/webhooks/{w['id']}/deliveries", ADMIN_KEY)
    for _ in range(200):
        if st == 200 and ds["data"] and ds["data"][0]["attempts"] >= 1:
            break
        time.sleep(0.05)
        st, ds = api("GET", f"/v1/webhooks/{w['id']}/deliveries", ADMIN_KEY)
    assert ds["data"] and ds["data"][0]["attempts"] >= 1, ds
    b.find(f"{row} button.ghost").click()
    b.wait_js("the deliveries", "return document.querySelectorAll('#webhook-deliveries-body tr[data-event]').length > 0")
    text = b.js("return document.getElementById('webhook-deliveries-body').textContent")
    assert ds["data"][0]["event_id"] in text and "run.completed" in text and "pending" in text, text
    shot(b, "27-admin-webhook-deliveries")
    btn = f"{row} button.danger"
    b.find(btn).click()
    b.find(btn).click()
    b.wait_js("the endpoint to go", f"return !document.querySelector(\"{row}\")")
    assert api("GET", f"/v1/webhooks/{w['id']}", ADMIN_KEY)[0] == 404, "not deleted"


class FlakyReceiver:
    """A webhook endpoint on a loopback port that answers each event's first attempt 500 and its
    next 204: every delivery ends delivered after one retry, its history two attempts."""

    def __init__(self):
        seen = {}
        lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                event = self.headers["Ephemeral-Event-Id"]
                with lock:
                    seen[event] = seen.get(event, 0) + 1
                    first = seen[event] == 1
                self.send_response(500 if first else 204)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def delivery_rows(b):
    return b.js("return [...document.querySelectorAll('#webhook-deliveries-body tr[data-event]')].map(r => r.dataset.event)")


@test()
def admin_pages_deliveries_and_shows_their_attempts(b):
    """More deliveries than a page (the page's ?limit=2): "More" appends the next page until the
    API has no more, then goes; an event's button (by click and by keyboard) shows its attempts as
    the API's history has them, closed by Close or Escape with the focus back on the button."""
    receiver = FlakyReceiver()
    try:
        st, w = api("POST", "/v1/webhooks", ADMIN_KEY, {"url": receiver.url, "events": ["run.cancelled"]})
        assert st == 201, w
        for _ in range(5):
            cancel(new_run(SEED["prompt"]))

        def settled():
            st, ds = api("GET", f"/v1/webhooks/{w['id']}/deliveries?limit=100", ADMIN_KEY)
            done = st == 200 and len(ds["data"]) == 5 and all(d["status"] == "delivered" for d in ds["data"])
            return ds["data"] if done else None
        every = b.wait("five deliveries, each delivered at its second attempt", settled, timeout=90)
        assert all(d["attempts"] == 2 for d in every), every
        admin_page(b)
        b.get(ctx.url + "/keys?limit=2")
        row = f"#webhooks-body tr[data-webhook='{w['id']}']"
        b.wait_js("the endpoint's row", "return !!document.querySelector(arguments[0])", row)
        b.find(f"{row} button.ghost").click()
        more = "const m = document.getElementById('webhook-deliveries-more'); return !!m && !m.hidden"
        for n in (2, 4):
            got = b.wait_js(f"{n} deliveries", "const r = document.querySelectorAll('#webhook-deliveries-body tr[data-event]');"
                            "return r.length === arguments[0]", n)
            assert got and delivery_rows(b) == [d["event_id"] for d in every[:n]], (delivery_rows(b), every)
            assert b.js(more), f"no More under {n} of 5 deliveries"
            if n == 2:
                shot(b, "28-admin-webhook-deliveries-more")
            b.find("#webhook-deliveries-more").click()
        b.wait_js("the last page", "return document.querySelectorAll('#webhook-deliveries-body tr[data-event]').length === 5"
                  " && document.getElementById('webhook-deliveries-more').hidden")
        assert delivery_rows(b) == [d["event_id"] for d in every], (delivery_rows(b), every)
        focused = b.js("return document.activeElement.closest('tr')?.dataset.event")
        assert focused == every[4]["event_id"], f"the focus went with More, not to the row it brought: {focused}"
        after = [p for _, p, _ in ctx.proxy.seen("GET", f"/v1/webhooks/{w['id']}/deliveries?")]
        assert after[-2:] == [f"/v1/webhooks/{w['id']}/deliveries?limit=2&after={every[1]['event_id']}",
                              f"/v1/webhooks/{w['id']}/deliveries?limit=2&after={every[3]['event_id']}"], after

        def attempts_shown(event_id):
            return b.wait_js(f"the attempts of {event_id}",
                             "const p = document.getElementById('webhook-attempts');"
                             "if (!p || p.hidden || !p.querySelector('h3').textContent.includes(arguments[0])) return null;"
                             "return [...p.querySelectorAll('#webhook-attempts-body tr[data-attempt]')].map(r =>"
                             " [...r.cells].map(c => c.querySelector('time') ? c.querySelector('time').getAttribute('datetime')"
                             " : c.textContent))", event_id)

        def expected(event_id):
            st, d = api("GET", f"/v1/webhooks/{w['id']}/deliveries/{event_id}", ADMIN_KEY)
            assert st == 200 and len(d["history"]) == 2, d
            return [[str(a["attempt"]), a["outcome"], a["at"], "—" if a["http_status"] is None else str(a["http_status"]),
                     f"{a['duration_ms']} ms", a["error"] or "—"] for a in d["history"]]

        button = "#webhook-deliveries-body tr[data-event='{}'] button"
        first = every[0]["event_id"]
        b.find(button.format(first)).click()
        got = attempts_shown(first)
        want = expected(first)
        assert got == want, (got, want)
        assert [r[1] for r in got] == ["retried", "delivered"] and [r[3] for r in got] == ["500", "204"], got
        assert b.find(button.format(first)).prop("ariaExpanded") == "true"
        shot(b, "29-admin-webhook-attempts")
        b.find("#webhook-attempts-close").click()
        b.wait_js("the attempts to close", "return document.getElementById('webhook-attempts').hidden")
        assert b.js("return document.activeElement.closest('tr').dataset.event") == first
        # The keyboard alone, on a row that "More" brought: Enter opens, Escape closes.
        last = every[-1]["event_id"]
        b.js("document.querySelector(arguments[0]).focus()", button.format(last))
        b.keys(KEYS["ENTER"])
        got = attempts_shown(last)
        want = expected(last)
        assert got == want, (got, want)
        assert b.js("return document.activeElement.id") == "webhook-attempts-title"
        b.keys(KEYS["ESCAPE"])
        b.wait_js("the attempts to close", "return document.getElementById('webhook-attempts').hidden")
        assert b.js("return document.activeElement.closest('tr').dataset.event") == last
        assert b.find(button.format(last)).prop("ariaExpanded") == "false"
    finally:
        receiver.close()
        for x in api("GET", "/v1/webhooks", ADMIN_KEY)[1]["data"]:
            if x["url"] == receiver.url:
                api("DELETE", f"/v1/webhooks/{x['id']}", ADMIN_KEY)


@test()
def admin_adds_credit(b):
    """Dollars in, micros sent; a bad amount refused before any request; the balance follows."""
    admin_page(b)
    posts = len(ctx.proxy.seen("POST", "/v1/credits"))
    for bad in ("abc", "0", "1.0000001", "-2"):
        fill(b, "#credit-amount", bad)
        b.find("#credit-add").click()
        shown = b.wait_js("the amount's error", "const e = document.getElementById('credit-error'); return !e.hidden && e.textContent")
        assert shown.startswith("Amount:"), (bad, shown)
        b.js("document.getElementById('credit-error').hidden = true")
    assert len(ctx.proxy.seen("POST", "/v1/credits")) == posts, "a bad amount was sent"
    st, before = api("GET", "/v1/balance", ADMIN_KEY)
    fill(b, "#credit-amount", "2.5")
    b.find("#credit-add").click()
    done = b.wait_js("the credit", "return document.getElementById('credit-done').textContent")
    st, after = api("GET", "/v1/balance", ADMIN_KEY)
    assert after["balance_micros"] - before["balance_micros"] == 2500000, (before, after)
    assert done.startswith("Added $2.50") and money(after["balance_micros"]) in done, done
    sent = ctx.proxy.seen("POST", "/v1/credits")[-1]
    assert sent[2].get("idempotency-key"), sent
    b.wait_js("the header's balance", "return document.getElementById('balance').textContent === arguments[0]",
              f"Balance {money(after['available_micros'])}")
    assert b.find("#credit-amount").prop("value") == ""
    shot(b, "24-admin-credit")


@test()
def admin_lists_the_models(b):
    """GET /v1/models on the page: each model with its prices and availability."""
    admin_page(b)
    st, models = api("GET", "/v1/models", MEMBER_KEY)
    rows = b.wait_js("the models", "const r = [...document.querySelectorAll('#models-body tr')];"
                     "return r.length ? r.map(x => [x.dataset.model, x.textContent]) : null")
    assert [r[0] for r in rows] == [m["id"] for m in models["data"]], (rows, models)
    for (mid, text), m in zip(rows, models["data"]):
        p = m["prices"]
        for v in (money(p["input_micros_per_mtok"]), money(p["output_micros_per_mtok"])):
            assert v in text, (v, text)
        assert ("yes" in text) == m["available"], text
        assert ("default" in text) == m["default"], text


@test(allow=[HTTP_4XX])
def images_listed_and_picked(b):
    """The admin page lists the images with their state (a recipe whose package does not exist:
    building, then failed with apt's reason); the playground sends the image it names, and an
    image that does not exist comes back refused at its field (docs/IMAGES.md)."""
    st, img = api("POST", "/v1/images", ADMIN_KEY, {"name": "webui-broken", "packages": ["no-such-package-webui"]})
    assert st in (202, 409), (st, img)
    admin_page(b)
    row = b.wait_js("the image in the list", "const r = document.querySelector(`#images-body tr[data-image='webui-broken']`);"
                    "return r && r.textContent")
    assert "webui-broken" in row and ("building" in row or "failed" in row), row
    assert "no-such-package-webui" in row, row
    shot(b, "25-admin-images")
    b.find("nav a[data-page='playground']").click()
    b.wait_js("the image field", "return !!document.getElementById('pg-image')")
    fill(b, "#pg-image", "no-such-image")
    body = b.wait_js("the image in the request", "const t = document.getElementById('request-json').textContent;"
                     "return t.includes('no-such-image') && t")
    assert json.loads(body)["image"] == "no-such-image", body
    b.find("#pg-run").click()
    err = b.wait_js("the refusal", "const e = document.getElementById('pg-error'); return e && !e.hidden && e.textContent")
    assert "no image named 'no-such-image'" in err and "'default'" in err, err
    assert b.js("return document.getElementById('pg-image').getAttribute('aria-invalid')") == "true"
    fill(b, "#pg-image", "default")
    body = b.js("return document.getElementById('request-json').textContent")
    assert "image" not in json.loads(body), body


@test()
def runs_list_shows_prompts_and_metadata(b):
    """The prompt cut to 80 characters (whole in its title), ZDR said, metadata chips, the filter."""
    long_prompt = "webui list: " + "a prompt long enough to be cut on the runs list, " * 3 + "the end"
    made = []
    for case, body in (("one", {"prompt": long_prompt}),
                       ("two", {"prompt": SPACED_PROMPT}),
                       ("zdr", {"prompt": SPACED_PROMPT, "zero_data_retention": True})):
        md = {"suite": "webui-md", "case": case}
        if case == "one":
            md["transcript"] = "spaced"
        st, run = api("POST", "/v1/runs", MEMBER_KEY, {**body, "max_cost_micros": 30000, "metadata": md})
        assert st == 201, (case, st, run)
        made.append(run["id"])
    for rid in made:
        finished(rid)
    use_key(b, MEMBER_KEY)
    b.find("nav a[data-page='runs']").click()
    got = b.wait_js("the rows", "const r = [...document.querySelectorAll('#runs-body tr[data-id]')];"
                    "return r.length ? r.slice(0, 3).map(x => ({id: x.dataset.id, prompt: x.querySelector('.prompt').textContent,"
                    "title: x.querySelector('.prompt').title, chips: [...x.querySelectorAll('.chip')].map(c => c.textContent),"
                    "cost: x.querySelector('.cost').textContent}))"
                    " : null")
    assert [g["id"] for g in got] == made[::-1], (got, made)
    zdr, two, one = got
    assert zdr["prompt"] == "zero data retention", zdr
    assert two["prompt"] == SPACED_PROMPT and two["title"] == SPACED_PROMPT, two
    assert one["title"] == long_prompt and len(one["prompt"]) == 80 and one["prompt"].endswith("…"), one
    assert long_prompt.startswith(one["prompt"][:-1]), one
    assert sorted(one["chips"]) == ["case=one", "suite=webui-md", "transcript=spaced"], one
    assert sorted(two["chips"]) == ["case=two", "suite=webui-md"], two
    st, r = api("GET", f"/v1/runs/{made[1]}", MEMBER_KEY)
    assert two["cost"] == f"{money(r['cost']['charged_micros'])} of {money(r['cost']['reserved_micros'])}", two
    shot(b, "25-runs-prompts-metadata")
    # The filter: key=value becomes metadata[key]=value, the list is the API's.
    fill(b, "#metadata-filter", "case=two")
    b.find("#metadata-form button[type=submit]").click()
    b.wait("the filtered URL", lambda: "metadata%5Bcase%5D=two" in b.url)
    st, want = api("GET", "/v1/runs?metadata%5Bcase%5D=two", MEMBER_KEY)
    ids = b.wait_js("the filtered list", "const r = [...document.querySelectorAll('#runs-body tr[data-id]')];"
                    "return r.length && r.length === arguments[0] ? r.map(x => x.dataset.id) : null", len(want["data"]))
    assert ids == [r["id"] for r in want["data"]] and made[1] in ids and made[0] not in ids, (ids, want)
    assert any("metadata%5Bcase%5D=two" in r[1] or "metadata[case]=two" in r[1]
               for r in ctx.proxy.seen("GET", "/v1/runs?")), "the filter was not sent to the API"
    # The filter is kept across pages.
    b.get(ctx.url + "/runs?metadata%5Bsuite%5D=webui-md&limit=1")
    first = b.wait_js("the first page", "const r = document.querySelector('#runs-body tr[data-id]'); return r && r.dataset.id")
    assert first == made[2], first
    b.find("#older").click()
    second = b.wait_js("the second page", "const r = document.querySelector('#runs-body tr[data-id]');"
                       "return r && r.dataset.id !== arguments[0] && r.dataset.id", first)
    assert second == made[1] and "metadata%5Bsuite%5D=webui-md" in b.url, (second, b.url)
    # A filter without a key is refused in the page.
    fill(b, "#metadata-filter", "=two")
    url = b.url
    b.find("#metadata-form button[type=submit]").click()
    shown = b.wait_js("the filter's error", "const e = document.getElementById('metadata-filter-error'); return !e.hidden && e.textContent")
    assert "key=value" in shown and b.url == url, shown


@test()
def the_cost_accrues_while_a_run_runs(b):
    """While a run runs, its cost so far (the model's calls, the compute): the API's figures."""
    run_id = new_run(SLOW_PROMPT, 50000)
    try:
        open_run(b, run_id)
        b.wait_js("the model's call", "return !!document.querySelector('#timeline-body tr[data-type=\"model.call\"]')")
        model = sum(e["data"].get("cost_micros", 0) for e in events_of(run_id) if e["type"] == "model.call")
        assert model > 0, "the fixture's model call cost nothing"

        def same_as_api():
            st, r = api("GET", f"/v1/runs/{run_id}", MEMBER_KEY)
            if r["status"] != "running":
                raise AssertionError(f"the run is {r['status']}, not running")
            c = r["cost"]
            shown = b.js("const e = document.getElementById('cost-so-far'); return e && e.textContent")
            want = f"{money(c['charged_micros'])} so far of {money(c['reserved_micros'])}"
            return (shown, c) if shown == want and c["compute_micros"] > 0 else None
        shown, c = b.wait("the cost so far, as the API measures it", same_as_api)
        legend = b.find("#cost-legend").text
        assert f"Model {money(model)}" in legend, (legend, model)
        assert c["charged_micros"] == c["model_micros"] + c["web_micros"] + c["compute_micros"], c
        compute = b.js("return document.querySelector('#cost .seg.compute').hidden")
        assert not compute, "no compute in the bar"
        assert b.find("#run-summary").text.startswith(shown), b.find("#run-summary").text
        assert b.find("#run-status").text == "Running"
        shot(b, "26-cost-so-far")
    finally:
        api("POST", f"/v1/runs/{run_id}/cancel", MEMBER_KEY)
    wait_destroyed(b)
    b.wait_js("the settled cost", "return !document.getElementById('cost-so-far') && /Released/.test(document.getElementById('cost-legend').textContent)")
    c = finished(run_id)["cost"]
    shown_micros = lambda m: (m // 10 + (1 if m % 10 >= 5 else 0)) * 10
    legend = b.find("#cost-legend").text
    amounts = dict(re.findall(r"(Model|Web|Compute|Released) \$([0-9.]+)", legend))
    cents = {k: round(float(v) * 1000000) for k, v in amounts.items()}
    # The amounts shown add up: the parts to the charge, the charge and the rest to the budget.
    assert cents["Model"] + cents["Web"] + cents["Compute"] == shown_micros(c["charged_micros"]), (legend, c)
    assert shown_micros(c["charged_micros"]) + cents["Released"] == shown_micros(c["reserved_micros"]), (legend, c)


@test()
def a_running_command_shows_its_output(b):
    """While a command runs, its output appears under it as it comes (shell.output), as text;
    when it ends, the command's own row takes that place."""
    run_id = new_run(LIVE_PROMPT)
    open_run(b, run_id)
    live_text = ("return [...document.querySelectorAll('#timeline-body tr[data-type=\"shell.output\"]')]"
                 ".filter(r => !r.hidden).map(r => r.querySelector('pre.out').textContent).join('')")
    b.wait_js("the command's first lines, live", f"return /tick-2/.test((() => {{ {live_text} }})())",
              timeout=60)
    # Still running: the command's own row is not there yet, and the output is text.
    assert not b.js("return !!document.querySelector('#timeline-body tr[data-type=\"shell.command\"]')")
    out = b.js(live_text)
    assert out.startswith("tick-1\ntick-2\n"), out
    assert "running" in b.find('#timeline-body tr[data-type="shell.output"]').text
    shot(b, "27-live-output")
    wait_destroyed(b)
    b.wait_js("the command's row in place of its live output",
              "return !!document.querySelector('#timeline-body tr[data-type=\"shell.command\"]') &&"
              " !document.querySelector('#timeline-body tr[data-type=\"shell.output\"]:not([hidden])')")
    # Every event has its row, the folded ones hidden: the timeline is the API's, event by event.
    assert [r["seq"] for r in timeline(b)] == [e["seq"] for e in events_of(run_id)]
    ev = [e for e in events_of(run_id) if e["type"] == "shell.output"]
    assert ev and all(e["data"]["call"] == "call_live" for e in ev), ev
    assert "".join(e["data"]["text"] for e in ev if e["data"]["stream"] == "stdout") == \
        "".join(f"tick-{i}\n" for i in range(1, 9)), ev


def outputs_run(zdr=False):
    """A run of the outputs fixture: notes.txt (markup as text), chart.png (6x4), page.html and
    logo.svg (each with a script), pw, a symlink to /etc/passwd, and big.txt (2 MiB of text)."""
    body = {"prompt": OUTPUTS_REQUEST["prompt"], "shell": True, "max_cost_micros": 30000,
            "outputs": OUTPUTS_REQUEST["outputs"]}
    if zdr:
        body["zero_data_retention"] = True
    st, run = api("POST", "/v1/runs", MEMBER_KEY, body)
    assert st == 201, f"create run: {st} {run}"
    return run["id"]


NOTES = "<b>not bold</b> & <script>window.pwned = 1</script>\nsecond line\n"


def item(b, path):
    """What the run view's outputs list shows for one path (None while it is not there)."""
    return b.js("const li = [...document.querySelectorAll('#outputs-list > li')]"
                ".find(l => l.dataset.path === arguments[0]);"
                "if (!li) return null;"
                "const img = li.querySelector('img'); const pre = li.querySelector('pre');"
                "return {path: li.querySelector('code.opath').textContent,"
                " size: li.querySelector('.osize')?.textContent ?? null, text: li.textContent,"
                " buttons: [...li.querySelectorAll('button')].map(x => x.textContent),"
                " img: img && {src: img.getAttribute('src'), done: img.complete,"
                "   w: img.naturalWidth, h: img.naturalHeight},"
                " pre: pre && pre.textContent, tags: [...li.querySelectorAll('*')].map(e => e.localName)}", path)


def check_outputs_view(b, files):
    """The outputs list as it must be for the fixture, against the API's list (files)."""
    b.wait_js("the outputs list", "return !!document.getElementById('outputs-list')", timeout=60)
    shown = b.js("return [...document.querySelectorAll('#outputs-list > li')].map(l => l.dataset.path)")
    assert sorted(shown) == sorted(f["path"] for f in files), (shown, files)
    for f in files:
        it = item(b, f["path"])
        assert it["path"] == f["path"], it
        if f["type"] == "symlink":
            assert "symlink → /etc/passwd" in it["text"] and not it["buttons"] and it["size"] is None, it
            continue
        assert it["size"] == f"{f['size']:,} bytes", (it, f)
        assert it["buttons"] == ["Download"], it
    # Text: the file's own characters, its markup as text (no element made of it).
    pre = b.wait_js("notes.txt as text", "const p = document.querySelector('#outputs-list > li[data-path=\"notes.txt\"] pre');"
                    "return p && p.textContent")
    assert pre == NOTES, pre
    assert item(b, "notes.txt")["tags"] == ["code", "span", "span", "button", "div", "pre"], item(b, "notes.txt")
    # A raster image: an <img> whose source is a blob: URL of this origin, decoded as the PNG.
    img = b.wait("chart.png as an image", lambda: (lambda i: i["img"] if i["img"] and i["img"]["done"] else None)(item(b, "chart.png")))
    assert img["src"].startswith(f"blob:{ctx.url}/"), img
    assert (img["w"], img["h"]) == (6, 4), img
    # HTML and SVG: a download button, nothing rendered, no script run.
    for path in ("page.html", "logo.svg"):
        it = item(b, path)
        assert it["img"] is None and it["pre"] is None, it
        assert "application/octet-stream" in it["text"], it
        assert it["tags"] == ["code", "span", "span", "button"], it
    # Text above the inline limit (1 MiB): listed with a download button, its bytes not read.
    big = item(b, "big.txt")
    assert big["size"] == "2,097,152 bytes" and big["pre"] is None, big
    assert big["tags"] == ["code", "span", "span", "button"], big
    assert b.js("return document.querySelectorAll('#outputs img').length") == 1
    assert b.js("return document.querySelectorAll('#outputs iframe, #outputs object, #outputs embed, #outputs svg,"
                " #outputs script, #outputs a').length") == 0
    assert b.js("return !document.getElementById('pwned-html') && !document.getElementById('pwned-svg')"
                " && window.pwned === undefined")


@test()
def a_runs_outputs_are_listed_and_shown_safely(b):
    """The run view lists each output with its size; text shown as text, a PNG as an <img> from a
    blob: URL, HTML and SVG only as a download (never fetched to show, never rendered), text over
    1 MiB not read, a symlink with its target; Download saves the bytes as they are."""
    run_id = outputs_run()
    finished(run_id)
    st, lst = api("GET", f"/v1/runs/{run_id}/outputs", MEMBER_KEY)
    assert st == 200 and len(lst["data"]) == 6, lst
    ctx.outputs_list = lst["data"]
    before = len(ctx.proxy.seen("GET", f"/v1/runs/{run_id}/outputs/"))
    open_run(b, run_id, settled=True)
    check_outputs_view(b, lst["data"])
    shot(b, "28-run-outputs")
    # Only the text and the image were fetched to be shown.
    fetched = sorted(r[1].rsplit("/", 1)[1] for r in ctx.proxy.seen("GET", f"/v1/runs/{run_id}/outputs/")[before:])
    assert fetched == ["chart.png", "notes.txt"], fetched
    # Download: the HTML file's bytes saved as a file, the page where it was.
    downloads = os.path.join(TMP, "downloads")
    os.makedirs(downloads, exist_ok=True)
    b.cdp("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": downloads})
    url = b.url
    b.find("#outputs-list > li[data-path='page.html'] button").click()
    saved = os.path.join(downloads, "page.html")
    b.wait("page.html downloaded", lambda: os.path.exists(saved) and os.path.getsize(saved) > 0)
    with urllib.request.urlopen(urllib.request.Request(f"{SERVER}/v1/runs/{run_id}/outputs/page.html",
                                                       headers={"Authorization": f"Bearer {MEMBER_KEY}"})) as r:
        want = r.read()
    assert open(saved, "rb").read() == want, "the download is not the output's bytes"
    assert b.url == url and b.js("return window.pwned === undefined && !document.getElementById('pwned-html')")


@test()
def zero_data_retention_outputs_reach_the_following_page(b):
    """A ZDR run's outputs reach the page that follows it (the list parked until the run ends,
    the bytes inline), shown the same safe way; the API keeps none, and reopened the page says so."""
    run_id = outputs_run(zdr=True)
    open_run(b, run_id)
    parked = lambda: [r for r in ctx.proxy.seen("GET", f"/v1/runs/{run_id}/outputs")
                      if r[1].endswith("/outputs") and r[2].get("prefer", "").startswith("wait=")]
    b.wait("the page waiting for the outputs", parked)
    st, run = api("GET", f"/v1/runs/{run_id}", MEMBER_KEY)
    assert st == 200 and run["status"] not in TERMINAL, f"the run ended before the page waited: {run['status']}"
    b.wait_js("the outputs list", "return !!document.getElementById('outputs-list')", timeout=90)
    # The sizes to show are those of the same files from a stored run (the API keeps no list here).
    if not getattr(ctx, "outputs_list", None):
        other = outputs_run()
        finished(other)
        ctx.outputs_list = api("GET", f"/v1/runs/{other}/outputs", MEMBER_KEY)[1]["data"]
    files = ctx.outputs_list
    check_outputs_view(b, files)
    # Nothing was fetched by path: the bytes came inline with the list.
    assert not ctx.proxy.seen("GET", f"/v1/runs/{run_id}/outputs/"), ctx.proxy.seen("GET", f"/v1/runs/{run_id}/outputs/")
    shot(b, "29-zdr-outputs")
    wait_destroyed(b)
    finished(run_id)
    st, lst = api("GET", f"/v1/runs/{run_id}/outputs", MEMBER_KEY)
    assert st == 200 and lst["data"] == [], lst
    open_run(b, run_id, settled=True)
    text = b.wait_js("the ZDR note", "const t = document.getElementById('outputs').textContent;"
                     "return t.includes('not kept') && t")
    assert "notes.txt" not in text, text


@test()
def a_sandbox_is_listed_viewed_live_and_destroyed(b):
    """A sandbox made through the API: the Sandboxes page lists it live with its metadata, its
    view shows the command and its output live (markup in the output as text), and Destroy ends
    it there."""
    st, sbx = api("POST", "/v1/sandboxes", MEMBER_KEY,
                  {"max_cost_micros": 500000, "metadata": {"ui": "<b>sbx-meta</b>"}}, wait=120)
    assert st == 201 and sbx["status"] == "ready", (st, sbx)
    sid = sbx["id"]
    marker = "<img src=x onerror=window.__sbxXss=1><script>window.__sbxXss=1</script>"
    st, res = api("POST", f"/v1/sandboxes/{sid}/commands", MEMBER_KEY,
                  {"command": f"printf '%s\\n' sbx-ui-marker '{marker}'"}, wait=120)
    assert st == 200 and res["exit_code"] == 0 and marker in res["stdout"], (st, res)
    use_key(b, MEMBER_KEY)
    # The list, reached from the header's navigation: the sandbox is there, ready.
    b.find('nav a[data-page="sandboxes"]').click()
    row = b.wait_js("the sandbox in the list",
                    "const r = document.querySelector(`#sandboxes-body tr[data-id=\"${arguments[0]}\"]`);"
                    "return r ? r.textContent : null", sid)
    assert "Ready" in row and "<b>sbx-meta</b>" in row and "so far of" in row, row
    assert not b.js("return !!document.querySelector('#sandboxes-body b')")
    shot(b, "40-sandboxes-list")
    b.find(f'#sandboxes-body tr[data-id="{sid}"] a').click()
    b.wait_js("the view live", "return document.getElementById('live-state').dataset.state === 'live'")
    cmd = b.wait_js("the command in the timeline",
                    "const r = document.querySelector('#timeline-body tr[data-type=\"shell.command\"]');"
                    "return r ? r.querySelector('.msg').textContent : null")
    assert "sbx-ui-marker" in cmd and marker in cmd, cmd
    # The output is text: no element made of it, nothing of it ran.
    assert not b.js("return !!document.querySelector('#timeline-body img, #timeline-body script, #sbx-metadata b')")
    assert b.js("return window.__sbxXss === undefined")
    assert b.find("#sbx-status").text == "Ready"
    facts = b.js("return Object.fromEntries([...document.querySelectorAll('#sbx-facts td')].map(t => [t.dataset.fact, t.textContent]))")
    assert facts["Timeout"] == "300 s" and facts["Idle timeout"] == "300 s" and facts["Image"] == "default", facts
    assert facts["Reserved"] == money(500000), facts
    shot(b, "41-sandbox-live")
    # Destroy, confirmed: the sandbox ends, the button stays disabled.
    btn = b.find("#destroy")
    assert not b.js("return document.getElementById('destroy').disabled")
    btn.click()
    b.wait_js("the confirmation", "return document.getElementById('destroy').textContent === 'Really destroy?'")
    btn.click()
    b.wait_js("the sandbox stopped", "return document.getElementById('sbx-status').textContent === 'Stopped'")
    wait_destroyed(b)
    b.wait_js("the end of the event stream", "return document.getElementById('live-state').dataset.state === 'done'")
    assert b.js("return document.getElementById('destroy').disabled")
    st, final = api("GET", f"/v1/sandboxes/{sid}", MEMBER_KEY)
    assert st == 200 and final["status"] == "stopped", final
    c = final["cost"]
    assert c["charged_micros"] + c["released_micros"] == c["reserved_micros"], c
    b.wait_js("the settled money", "return document.querySelector('#sbx-facts td[data-fact=\"Charged\"]').textContent === arguments[0]",
              money(c["charged_micros"]))
    assert [r["seq"] for r in timeline(b)] == [e["seq"] for e in api("GET", f"/v1/sandboxes/{sid}/events", MEMBER_KEY)[1]["data"]]
    shot(b, "42-sandbox-destroyed")
    # Back in the list it is stopped, and the status filter finds it.
    b.find(".crumbs a").click()
    b.wait_js("the list", "return !!document.querySelector(`#sandboxes-body tr[data-id=\"${arguments[0]}\"]`)", sid)
    b.js("const s = document.getElementById('sbx-status-filter'); s.value = 'stopped'; s.dispatchEvent(new Event('change'))")
    b.wait("the filtered URL", lambda: "status=stopped" in b.url)
    got = b.wait_js("the filtered list", "const r = [...document.querySelectorAll('#sandboxes-body tr[data-id]')];"
                    "return r.length ? r.map(x => [x.dataset.id, x.querySelector('.pill').textContent]) : null")
    assert sid in [g[0] for g in got] and all(g[1] == "Stopped" for g in got), got
    # Its address typed (or reloaded) draws the same view: the server answers the page's path.
    b.get(f"{ctx.url}/sandboxes/{sid}")
    b.wait_js("the view from its address", "return document.getElementById('sbx-status')?.textContent === 'Stopped'")
    b.get(f"{ctx.url}/sandboxes?status=stopped")
    b.wait_js("the list from its address", "return !!document.querySelector(`#sandboxes-body tr[data-id=\"${arguments[0]}\"]`)", sid)


@test(allow=[r"net::ERR_"])
def a_down_server_reads_cannot_reach(b):
    """The server gone: every fetch that fails says "cannot reach the server at <origin>"."""
    use_key(b, MEMBER_KEY)
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    dead = free.getsockname()[1]
    free.close()
    target = ctx.proxy.target
    want = f"cannot reach the server at {ctx.url}"
    ctx.proxy.target = dead
    try:
        ctx.proxy.cut()
        b.find("#pg-reset").click()
        b.wait_js("the form", "return !!document.getElementById('pg-run')")
        b.find("#pg-run").click()
        shown = b.wait_js("the playground's error", "const e = document.getElementById('pg-error'); return !e.hidden && e.textContent")
        assert want in shown.lower() and "failed to fetch" not in shown.lower(), shown
        b.find("nav a[data-page='runs']").click()
        shown = b.wait_js("the runs list's error", "const e = document.getElementById('runs-error'); return !e.hidden && e.textContent")
        assert want in shown.lower() and "failed to fetch" not in shown.lower(), shown
        b.js("history.pushState(null, '', '/runs/run_0123456789abcdef0123456789abcdef');"
             "dispatchEvent(new PopStateEvent('popstate'))")
        shown = b.wait_js("the run's error", "const e = document.getElementById('run-error'); return !e.hidden && e.textContent")
        assert want in shown.lower(), shown
        b.find("#nav-admin").click()
        shown = b.wait_js("the admin page's error", "const e = document.getElementById('admin-error'); return !e.hidden && e.textContent")
        assert want in shown.lower(), shown
        # The header: a key saved while the server is gone.
        b.find("#key-button").click()
        b.wait_js("the key dialog", "return document.getElementById('key-dialog').open")
        fill(b, "#key-input", MEMBER_KEY)
        b.find("#key-form button[type=submit]").click()
        b.wait_js("the header", "return document.getElementById('balance').textContent === 'Server unreachable'")
        shown = b.wait_js("the notice", "const e = document.getElementById('notice'); return !e.hidden && e.textContent")
        assert want in shown.lower(), shown
        page = b.js("return document.body.innerText").lower()
        assert "failed to fetch" not in page, page
        shot(b, "27-server-down")
    finally:
        ctx.proxy.target = target
    b.find("nav a[data-page='runs']").click()
    b.wait_js("the list again", "return document.querySelectorAll('#runs-body tr[data-id]').length > 0")


# ---------------------------------------------------------------- the runner

def main():
    # Stopped by the test's deadline: close the browser and its driver on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    os.makedirs(SHOTS, exist_ok=True)
    port = int(SERVER.rsplit(":", 1)[1])
    ctx.proxy = Proxy(port)
    ctx.url = f"http://127.0.0.1:{ctx.proxy.port}"
    failed = ran = 0
    with Browser(os.path.join(TMP, "chromium-profile"), os.path.join(TMP, "chromedriver.log")) as b:
        b.get("about:blank")
        b.console()
        b.network_urls()  # the browser's own start-up pages, before ours
        only = sys.argv[1:]  # names to run (all when none): for working on one test
        for t in [t for t in TESTS if not only or t.__name__ in only]:
            start = time.monotonic()
            ran += 1
            try:
                if t.__code__.co_argcount:
                    t(b)
                else:
                    t()
                # A blob: URL of this origin is bytes the page itself holds (a run's outputs).
                urls = [u for u in b.network_urls()
                        if not u.startswith(ctx.url + "/") and not u.startswith(f"blob:{ctx.url}/")]
                assert not urls, f"requests to another origin: {urls}"
                errors = [e for e in b.console() if e.get("level") == "SEVERE"]
                errors = [e for e in errors if not any(re.search(p, e["message"]) for p in t.allow)]
                assert not errors, f"console errors: {errors}"
                print(f"PASS  {t.__name__}  ({time.monotonic() - start:.1f} s)", flush=True)
            except Exception:
                failed += 1
                print(f"FAIL  {t.__name__}", flush=True)
                traceback.print_exc()
                try:
                    shot(b, f"FAIL-{t.__name__}")
                    b.console()
                    b.network_urls()
                except Exception:
                    pass
    print(f"{ran - failed} passed, {failed} failed; screenshots in {SHOTS}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
