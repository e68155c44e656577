#!/usr/bin/env python3
"""A rebinding resolver and its two targets, for tests/blackbox/broker_rebind.sh. Python standard
library only; run it inside the network namespace the test made (it binds 127.0.0.1:53).

    rebind_dns.py --log FILE [--max-seconds N]

A DNS server on UDP 127.0.0.1:53 answers every name under .test: the first A query for a name
(compared lowercase, without the trailing dot) gets 127.0.0.2, every later one 127.0.0.1; AAAA
queries get no address; other names NXDOMAIN. Two HTTP listeners share one port: "outside" on
127.0.0.2 (the address the broker checks and may reach) and "inside" on 127.0.0.1 (where a second
resolution would land). The port is printed alone on the first line of stdout. Every query and
request is appended to the log as one JSON line: {"dns": name, "type": "A", "answer": ...} or
{"http": "outside"|"inside", "path": ..., "host": ...}. Paths answer:

    /redirect?to=URL   a 302 to URL
    anything else      200 text/plain "outside PATH" or "inside PATH"
"""
import argparse, json, socket, struct, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit, parse_qs

lock = threading.Lock()


def log(path, obj):
    with lock, open(path, "a") as f:
        f.write(json.dumps(obj) + "\n")


def qname(data, off):
    labels = []
    while off < len(data):
        n = data[off]
        off += 1
        if n == 0:
            return ".".join(labels), off
        if n & 0xC0 or off + n > len(data):
            raise ValueError("bad name")
        labels.append(data[off:off + n].decode("ascii", "replace"))
        off += n
    raise ValueError("short name")


def dns_loop(sock, logpath):
    seen = {}
    while True:
        data, peer = sock.recvfrom(512)
        try:
            if len(data) < 12:
                continue
            qid, flags, qd = struct.unpack("!HHH", data[:6])
            if qd != 1:
                continue
            name, off = qname(data, 12)
            qtype, qclass = struct.unpack("!HH", data[off:off + 4])
            question = data[12:off + 4]
        except (ValueError, struct.error):
            continue
        key = name.lower().rstrip(".")
        rcode, answers, answer = 0, b"", None
        if not key.endswith(".test"):
            rcode = 3
        elif qtype == 1:
            with lock:
                n = seen.get(key, 0)
                seen[key] = n + 1
            answer = "127.0.0.2" if n == 0 else "127.0.0.1"
            answers = struct.pack("!HHHIH", 0xC00C, 1, 1, 0, 4) + socket.inet_aton(answer)
        log(logpath, {"dns": key, "type": {1: "A", 28: "AAAA"}.get(qtype, str(qtype)),
                      "answer": answer})
        head = struct.pack("!HHHHHH", qid, 0x8180 | rcode | (flags & 0x0100), 1,
                           1 if answers else 0, 0, 0)
        sock.sendto(head + question + answers, peer)


def make_handler(where, logpath):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_GET(self):
            log(logpath, {"http": where, "path": self.path, "host": self.headers.get("Host", "")})
            u = urlsplit(self.path)
            if u.path == "/redirect":
                self.send_response(302)
                self.send_header("Location", parse_qs(u.query).get("to", ["/"])[0])
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            data = ("%s %s\n" % (where, u.path)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--log", required=True)
    ap.add_argument("--max-seconds", type=int, default=240)
    a = ap.parse_args()
    dns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    dns.bind(("127.0.0.1", 53))
    outside = ThreadingHTTPServer(("127.0.0.2", 0), make_handler("outside", a.log))
    port = outside.server_address[1]
    inside = ThreadingHTTPServer(("127.0.0.1", port), make_handler("inside", a.log))
    for target in (lambda: dns_loop(dns, a.log), outside.serve_forever, inside.serve_forever):
        threading.Thread(target=target, daemon=True).start()
    print(port, flush=True)
    time.sleep(a.max_seconds)


if __name__ == "__main__":
    main()
