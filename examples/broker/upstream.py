#!/usr/bin/env python3
"""The example's stand-in for an external API and a web site, on a free loopback port (printed
alone on the first line). GET /v1/status answers JSON that echoes the Authorization header it got
(as a careless API might); GET /page answers a line of text."""
import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        if self.path.startswith("/v1/status"):
            body = json.dumps({"ok": True, "echo": self.headers.get("Authorization", "")})
            ctype = "application/json"
        else:
            body, ctype = "hello from the example web site", "text/plain"
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(srv.server_address[1], flush=True)
srv.serve_forever()
