"""A webhook receiver for the tests (tests/blackbox/webhooks.sh, pg_webhooks.sh), on loopback.

Usage: webhook_receiver.py PORT LOG UP_FILE [CERT KEY] (with CERT and KEY: HTTPS). /ok answers 200; /slow 200 after 0.2 s; /flaky 500
the first time, then 200; /hang answers after 5 s (past a short timeout); /redirect 302 to
/redirected; /reset closes the connection with a reset, answering nothing; /down 500 until the file UP_FILE exists, then 200. Every request is logged as a JSON
line: path, the signature header, User-Agent, Content-Type, the body as received (at most 1 MiB).
"""
import http.server, json, os, sys, threading, time
port, log, up = int(sys.argv[1]), sys.argv[2], sys.argv[3]
seen = {}
lock = threading.Lock()
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        n = min(int(self.headers.get("Content-Length", "0")), 1 << 20)
        body = self.rfile.read(n)
        line = json.dumps({"path": self.path, "sig": self.headers.get("Ephemeral-Signature"),
                           "ua": self.headers.get("User-Agent"),
                           "ct": self.headers.get("Content-Type"), "body": body.decode()})
        with lock:
            with open(log, "a") as f:
                f.write(line + "\n")
            seen[self.path] = seen.get(self.path, 0) + 1
        if self.path == "/hang":
            time.sleep(5)
            code = 200
        elif self.path == "/reset":
            # no answer at all: the connection is closed (RST: SO_LINGER 0)
            import socket, struct
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.close_connection = True
            return
        elif self.path == "/slow":
            time.sleep(0.2)
            code = 200
        elif self.path == "/flaky":
            code = 500 if seen[self.path] == 1 else 200
        elif self.path == "/redirect":
            self.send_response(302)
            self.send_header("Location", "/redirected")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        elif self.path == "/down":
            code = 200 if os.path.exists(up) else 500
        else:
            code = 200
        self.send_response(code)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *a):
        pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", port), H)
if len(sys.argv) > 5:
    import ssl
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(sys.argv[4], sys.argv[5])
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
server.serve_forever()
