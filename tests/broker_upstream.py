#!/usr/bin/env python3
"""A loopback HTTP upstream for the broker's tests. Python standard library only.

    broker_upstream.py --log FILE [--max-seconds N] [--cert PEM --key PEM]

Listens on 127.0.0.1 (a free port, printed alone on the first line of stdout). Every request is
appended to the log as one JSON line (method, path with its query, headers) before it is answered:
that is how a test proves what reached the upstream (the credential) and what did not (a denied
request). With --cert and --key it speaks HTTPS. Answers:

    /big?n=N      N bytes of a fixed pattern (Content-Length)
    /html         a small HTML page (with a script the text must not show)
    /redirect?to=URL   a 302 to URL
    /forms?mode=M an upstream that echoes every credential it got (Authorization and X-Key-*
                  header values, Basic's user and password, query values) in every form of
                  echo_forms(), and its URL in a Location; M is plain, gzip, deflate (the body
                  compressed), many (only the query value, raw and percent-encoded), trailer
                  (chunked "hello" with a trailer), zstd (an encoding nobody decodes), corrupt
                  (gzip that does not decode) or bomb (64 MiB of zeros, gzipped)
    anything else 200, text/plain, echoing the method, the path and the Authorization header it
                  received, in the body and in an X-Echo header (an upstream that echoes the
                  credential back, as some do)
"""
import argparse, base64, gzip, json, sys, threading, zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit, parse_qs, quote, quote_plus


def echo_forms(v):
    """The forms in which an upstream may echo a credential v (bytes): [(label, text)]."""
    s = v.decode("latin-1")
    b64 = base64.b64encode(v).decode()
    u64 = base64.urlsafe_b64encode(v).decode()
    out = [("raw", s), ("upper", s.upper()), ("lower", s.lower()),
           ("pct", quote(v, safe="")), ("pct-lower", quote(v, safe="").lower()),
           ("pct-slash", quote(v)), ("form", quote_plus(v)),
           ("json", json.dumps(s)[1:-1].replace("/", "\\/")),
           ("json-u", "".join("\\u%04x" % c for c in v)),
           ("json-U", "".join("\\u%04X" % c for c in v)),
           ("b64", b64), ("b64-nopad", b64.rstrip("=")), ("b64url", u64),
           ("b64url-nopad", u64.rstrip("=")), ("hex", v.hex()), ("HEX", v.hex().upper())]
    for a in range(3):  # inside a larger base64 text, at each alignment
        out.append(("b64-in-%d" % a, base64.b64encode(b"\xa5" * a + v + b"tail").decode()))
    return out


def credentials(headers, query):
    vals = []
    for k, v in headers.items():
        if k.lower() == "authorization" or k.lower().startswith("x-key"):
            vals.append(v.encode())
            if " " in v:
                scheme, tok = v.split(" ", 1)
                vals.append(tok.encode())
                if scheme.lower() == "basic":
                    up = base64.b64decode(tok)
                    vals += [up] + up.split(b":", 1)
    for vs in parse_qs(query).values():
        vals += [x.encode() for x in vs]
    return vals


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def handle_any(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        with open(self.server.log, "a") as f:
            f.write(json.dumps({"method": self.command, "path": self.path,
                                "headers": {k.lower(): v for k, v in self.headers.items()},
                                "body": body.decode("utf-8", "replace")}) + "\n")
        u = urlsplit(self.path)
        if u.path.endswith("/big"):
            size = int(parse_qs(u.query).get("n", ["0"])[0])
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(size))
            self.end_headers()
            chunk = bytes(range(97, 123)) * 2521
            sent = 0
            try:
                while sent < size:
                    part = chunk[: min(len(chunk), size - sent)]
                    self.wfile.write(part)
                    sent += len(part)
            except (BrokenPipeError, ConnectionResetError):
                pass
            return
        if u.path.endswith("/html"):
            return self.reply(200, "text/html; charset=utf-8",
                              b"<html><head><title>t</title><script>var hidden = 1;</script>"
                              b"</head><body><h1>Fetched page</h1><p>Hello &amp; welcome</p>"
                              b"</body></html>")
        if u.path.endswith("/redirect"):
            self.send_response(302)
            self.send_header("Location", parse_qs(u.query).get("to", ["/"])[0])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if u.path.endswith("/forms"):
            return self.forms(u)
        auth = self.headers.get("Authorization", "")
        text = "%s %s auth=[%s] body=[%s]\n" % (self.command, self.path, auth,
                                                 body.decode("utf-8", "replace"))
        data = text.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("X-Echo", auth)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def forms(self, u):
        mode = parse_qs(u.query).get("mode", ["plain"])[0]
        vals = credentials(self.headers, u.query)
        if mode == "many":
            q = parse_qs(u.query)["key"][0].encode()
            lines = ["query raw: %s" % q.decode(), "query pct: %s" % quote(q, safe="")]
        else:
            lines = ["%s: %s" % (label, f) for v in vals for label, f in echo_forms(v)]
        lines.append("url: %s" % self.path)
        body = ("\n".join(lines) + "\n").encode()
        if mode == "trailer":
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Trailer", "X-Tr")
            self.end_headers()
            self.wfile.write(b"5\r\nhello\r\n0\r\nX-Tr: trailer-text " + vals[-1] + b"\r\n\r\n")
            return
        enc = None
        if mode == "gzip":
            body, enc = gzip.compress(body), "gzip"
        elif mode == "deflate":
            body, enc = zlib.compress(body), "deflate"
        elif mode == "zstd":
            enc = "zstd"
        elif mode == "corrupt":
            body = gzip.compress(body)
            body, enc = body[:20] + bytes(b ^ 0x55 for b in body[20:40]) + body[40:], "gzip"
        elif mode == "bomb":
            body, enc = gzip.compress(bytes(64 << 20), 9), "gzip"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        if enc:
            self.send_header("Content-Encoding", enc)
        self.send_header("Location", self.path)
        if vals:
            self.send_header("Set-Cookie", "s=%s; Path=/" % base64.b64encode(vals[-1]).decode())
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def reply(self, status, ctype, data):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = handle_any


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--log", required=True)
    ap.add_argument("--max-seconds", type=int, default=300)
    ap.add_argument("--cert")
    ap.add_argument("--key")
    a = ap.parse_args()
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    if a.cert:
        import ssl
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(a.cert, a.key)
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    srv.daemon_threads = True
    srv.log = a.log
    print(srv.server_address[1], flush=True)
    threading.Timer(a.max_seconds, lambda: srv.shutdown()).start()
    srv.serve_forever()


if __name__ == "__main__":
    main()
