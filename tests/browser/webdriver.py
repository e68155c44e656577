"""A small WebDriver client (W3C protocol, standard library only) for Debian's chromedriver and
headless Chromium, with the few Chromium extensions the web UI's tests need: the browser's console
and network logs, and DevTools commands (device metrics, full-page screenshots).

    with Browser(user_data_dir) as b:
        b.get("http://127.0.0.1:8080/")
        b.find("#pg-run").click()
"""

import base64
import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request

ELEMENT = "element-6066-11e4-a52e-4f735466cecf"

KEYS = {"TAB": "\ue004", "ENTER": "\ue007", "SHIFT": "\ue008", "SPACE": "\ue00d", "ESCAPE": "\ue00c"}

# Chromium on a machine whose network is closed: nothing in the background may try to go out.
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-default-apps", "--disable-extensions", "--no-default-browser-check",
    "--disable-features=Translate,OptimizationHints,MediaRouter",
    "--window-size=1360,1000", "--lang=en-US",
]


class WebDriverError(Exception):
    pass


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Element:
    def __init__(self, browser, eid):
        self.b = browser
        self.id = eid

    def click(self):
        self.b.cmd("POST", f"/element/{self.id}/click", {})

    def send_keys(self, text):
        self.b.cmd("POST", f"/element/{self.id}/value", {"text": text})

    def clear(self):
        self.b.cmd("POST", f"/element/{self.id}/clear", {})

    @property
    def text(self):
        return self.b.cmd("GET", f"/element/{self.id}/text")

    def prop(self, name):
        return self.b.cmd("GET", f"/element/{self.id}/property/{name}")

    def as_arg(self):
        return {ELEMENT: self.id}


class Browser:
    """chromedriver on a free loopback port, and one session of headless Chromium."""

    def __init__(self, user_data_dir, log_path, binary="/usr/bin/chromium",
                 driver="/usr/bin/chromedriver"):
        self.port = free_port()
        self.log = open(log_path, "ab")
        self.driver = subprocess.Popen([driver, f"--port={self.port}"], stdout=self.log,
                                       stderr=subprocess.STDOUT)
        self.base = f"http://127.0.0.1:{self.port}"
        self.session = None
        deadline = time.monotonic() + 30
        while True:
            try:
                if self._http("GET", "/status")["value"].get("ready"):
                    break
            except (OSError, WebDriverError):
                pass
            if self.driver.poll() is not None or time.monotonic() > deadline:
                raise WebDriverError("chromedriver did not start")
            time.sleep(0.05)
        caps = {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": binary,
                "args": CHROMIUM_ARGS + [f"--user-data-dir={user_data_dir}"],
                "perfLoggingPrefs": {"enableNetwork": True, "enablePage": False},
            },
            "goog:loggingPrefs": {"browser": "ALL", "performance": "ALL"},
        }
        v = self._http("POST", "/session", {"capabilities": {"alwaysMatch": caps}})["value"]
        self.session = v["sessionId"]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        if self.session:
            try:
                self._http("DELETE", f"/session/{self.session}")
            except (OSError, WebDriverError):
                pass
            self.session = None
        if self.driver.poll() is None:
            self.driver.terminate()
            try:
                self.driver.wait(10)
            except subprocess.TimeoutExpired:
                self.driver.kill()
                self.driver.wait()
        self.log.close()

    def _http(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=120) as resp:
                return json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as e:
            try:
                v = json.loads(e.read()).get("value", {})
                msg = f"{v.get('error')}: {v.get('message', '')[:500]}"
            except ValueError:
                msg = str(e)
            raise WebDriverError(f"{method} {path}: {msg}") from None

    def cmd(self, method, path, body=None):
        return self._http(method, f"/session/{self.session}{path}", body)["value"]

    # ---- navigation and scripts ----

    def get(self, url):
        self.cmd("POST", "/url", {"url": url})

    @property
    def url(self):
        return self.cmd("GET", "/url")

    def js(self, script, *args):
        return self.cmd("POST", "/execute/sync", {"script": script, "args": list(args)})

    def js_async(self, script, *args):
        return self.cmd("POST", "/execute/async", {"script": script, "args": list(args)})

    def find(self, css):
        v = self.cmd("POST", "/element", {"using": "css selector", "value": css})
        return Element(self, v[ELEMENT])

    def find_all(self, css):
        v = self.cmd("POST", "/elements", {"using": "css selector", "value": css})
        return [Element(self, x[ELEMENT]) for x in v]

    def wait(self, what, cond, timeout=30, interval=0.05):
        """Polls cond() until it returns something true (returned), or fails after timeout."""
        deadline = time.monotonic() + timeout
        last = None
        while True:
            try:
                last = cond()
                if last:
                    return last
            except WebDriverError as e:
                last = e
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what} (last: {last!r})")
            time.sleep(interval)

    def wait_js(self, what, script, *args, timeout=30):
        return self.wait(what, lambda: self.js(script, *args), timeout)

    def keys(self, *keys):
        """Presses keys in order (each down then up), on whatever has the focus."""
        actions = []
        for k in keys:
            actions += [{"type": "keyDown", "value": k}, {"type": "keyUp", "value": k}]
        self.cmd("POST", "/actions", {"actions": [{"type": "key", "id": "kb", "actions": actions}]})

    # ---- Chromium extensions ----

    def cdp(self, command, params=None):
        return self.cmd("POST", "/goog/cdp/execute", {"cmd": command, "params": params or {}})

    def viewport(self, width, height, mobile=False):
        self.cdp("Emulation.setDeviceMetricsOverride",
                 {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile})

    def reset_viewport(self):
        self.cdp("Emulation.clearDeviceMetricsOverride")

    def screenshot(self, path, full_page=True):
        """A PNG of the page, the whole of it (not only the viewport) when full_page."""
        params = {"format": "png"}
        if full_page:
            m = self.cdp("Page.getLayoutMetrics")
            size = m.get("cssContentSize") or m["contentSize"]
            params["captureBeyondViewport"] = True
            params["clip"] = {"x": 0, "y": 0, "width": size["width"],
                              "height": min(size["height"], 6000), "scale": 1}
        data = self.cdp("Page.captureScreenshot", params)["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def console(self):
        """The browser's console entries since the last call: [{level, message, ...}]."""
        return self.cmd("POST", "/se/log", {"type": "browser"})

    def network_urls(self):
        """Every URL the page requested since the last call (from the performance log)."""
        urls = []
        for entry in self.cmd("POST", "/se/log", {"type": "performance"}):
            try:
                msg = json.loads(entry["message"])["message"]
            except (KeyError, ValueError):
                continue
            if msg.get("method") == "Network.requestWillBeSent":
                urls.append(msg["params"]["request"]["url"])
        return urls


def env_path(name):
    v = os.environ.get(name)
    if not v:
        raise SystemExit(f"{name} is not set")
    return v
