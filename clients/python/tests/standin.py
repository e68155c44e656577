"""A stand-in HTTP server on loopback for the tests: each request goes to a function the test
gives, which answers itself, proxies to the real server, or cuts the connection."""

import http.client
import http.server
import threading
import urllib.parse
from typing import Callable, Dict, List, Optional, Tuple


class Request:
    def __init__(self, method: str, path: str, headers: Dict[str, str], body: bytes) -> None:
        self.method = method
        self.path = path
        self.headers = headers
        self.body = body

    @property
    def route(self) -> str:
        return urllib.parse.urlsplit(self.path).path


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "StandIn"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        req = Request(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
        with self.server.lock:
            self.server.requests.append(req)
        self.server.answer(self, req)
        self.close_connection = True

    do_GET = do_HEAD = do_POST = do_DELETE = do_PUT = do_PATCH = _handle

    def reply(self, status: int, body: bytes = b"{}", headers: Optional[Dict[str, str]] = None,
              content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def proxy(self, req: Request, upstream: str,
              cut_after: Optional[Callable[[bytes], bool]] = None) -> None:
        """Sends the request on to the real server and streams its answer back; with
        ``cut_after``, the connection is closed in the middle of the answer as soon as that
        function says so about the bytes sent so far."""
        parts = urllib.parse.urlsplit(upstream)
        conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=60)
        headers = {k: v for k, v in req.headers.items() if k not in ("host", "connection")}
        conn.request(req.method, req.path, body=req.body or None, headers=headers)
        resp = conn.getresponse()
        self.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in ("transfer-encoding", "connection", "content-length", "date", "server"):
                self.send_header(k, v)
        self.send_header("Connection", "close")
        self.end_headers()
        sent = b""
        while True:
            line = resp.readline()
            if not line:
                break
            self.wfile.write(line)
            self.wfile.flush()
            sent += line
            if cut_after is not None and cut_after(sent):
                break
        conn.close()
        self.close_connection = True


class StandIn(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, answer: Callable[[Handler, Request], None]) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.answer = answer
        self.requests: List[Request] = []
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
        self.thread.join()

    def __enter__(self) -> "StandIn":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def routes(server: StandIn) -> List[Tuple[str, str]]:
    with server.lock:
        return [(r.method, r.route) for r in server.requests]
