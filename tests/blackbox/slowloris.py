#!/usr/bin/env python3
"""A slowloris client for api_slowloris.sh, bounded in count and time (loopback only).

  slowloris.py flood PORT PLAN PROBES LIMIT   (the key in EPHEMERAL_API_KEY)
      PLAN "SRC:N,...": from each source address, N connections that send part of a request
      head and never the rest. Waits (at most 30 s) until the server has closed, of each source
      with more than LIMIT, all but LIMIT; then, from each address of PROBES "SRC,...", asks
      /healthz and an authenticated GET /v1/balance on new connections; then counts the flood's
      connections the server still holds. Prints JSON: {"open": {SRC: n}, "probes": {SRC: [healthz
      status, balance status]}}.
  slowloris.py deadline PORT SRC N
      N connections from SRC with a partial head; waits (at most 60 s) for the server to close
      them. Prints how many it closed.
A status of 0 means no answer (the connection was refused or closed, or 30 s passed).
"""
import json
import os
import select
import socket
import sys
import time

PARTIAL = b"GET /healthz HTTP/1.1\r\nHost: slowloris\r\nX-Never-Ends: "


def open_partial(port, src):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((src, 0))
    s.settimeout(10)
    s.connect(("127.0.0.1", port))
    s.sendall(PARTIAL)
    s.setblocking(False)
    return s


def closed_by_server(s):
    """True when the server has closed s (EOF or reset); never blocks."""
    r, _, _ = select.select([s], [], [], 0)
    if not r:
        return False
    try:
        return s.recv(4096) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except BlockingIOError:
        return False


def ask(port, src, path, key=None):
    """The status of one request on a new connection from src, or 0."""
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind((src, 0))
        s.settimeout(30)
        s.connect(("127.0.0.1", port))
        head = "GET %s HTTP/1.1\r\nHost: probe\r\nConnection: close\r\n" % path
        if key:
            head += "Authorization: Bearer %s\r\n" % key
        s.sendall((head + "\r\n").encode())
        data = b""
        while b"\r\n" not in data and len(data) < 65536:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        s.close()
        parts = data.split(b" ", 2)
        return int(parts[1]) if len(parts) > 1 and parts[0].startswith(b"HTTP/") else 0
    except OSError:
        return 0


def flood(port, key, plan, probes, limit):
    socks = {}
    for item in plan.split(","):
        src, n = item.split(":")
        socks[src] = [open_partial(port, src) for _ in range(int(n))]
    closed = {src: set() for src in socks}

    def count():
        for src, ss in socks.items():
            for i, s in enumerate(ss):
                if i not in closed[src] and closed_by_server(s):
                    closed[src].add(i)

    end = time.monotonic() + 30
    while time.monotonic() < end:
        count()
        if all(len(ss) - len(closed[src]) <= limit for src, ss in socks.items()):
            break
        time.sleep(0.05)
    answers = {}
    for src in probes.split(","):
        answers[src] = [ask(port, src, "/healthz"), ask(port, src, "/v1/balance", key)]
    count()
    print(json.dumps({"open": {src: len(ss) - len(closed[src]) for src, ss in socks.items()},
                      "probes": answers}))
    for ss in socks.values():
        for s in ss:
            s.close()


def deadline(port, src, n):
    socks = [open_partial(port, src) for _ in range(n)]
    closed = set()
    end = time.monotonic() + 60
    while len(closed) < n and time.monotonic() < end:
        for i, s in enumerate(socks):
            if i not in closed and closed_by_server(s):
                closed.add(i)
        time.sleep(0.05)
    print(len(closed))
    for s in socks:
        s.close()


if __name__ == "__main__":
    if sys.argv[1] == "flood":
        flood(int(sys.argv[2]), os.environ["EPHEMERAL_API_KEY"], sys.argv[3], sys.argv[4],
              int(sys.argv[5]))
    elif sys.argv[1] == "deadline":
        deadline(int(sys.argv[2]), sys.argv[3], int(sys.argv[4]))
    else:
        sys.exit("usage: slowloris.py flood|deadline ...")
