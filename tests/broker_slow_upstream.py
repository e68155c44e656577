#!/usr/bin/env python3
"""A loopback upstream that takes requests and keeps them waiting, for the broker's stream tests.
Python standard library only.

    broker_slow_upstream.py --log FILE --release-dir DIR [--max-seconds N]

Listens on 127.0.0.1 (a free port, printed alone on the first line of stdout). Each request line
is appended to the log as one JSON line ({"line": ...}) once its head is read. Answers:

    /hold/NAME    nothing until the file DIR/NAME exists, then 200 "released NAME": a barrier the
                  test opens when it has measured what it wanted
    /ok           200 "ok" at once
    anything else never: the connection stays open, whatever the peer does, until the upstream
                  ends (--max-seconds)
"""
import argparse, json, os, socket, threading, time

HEAD_MAX = 65536


def read_head(conn):
    data = b""
    while b"\r\n\r\n" not in data and len(data) < HEAD_MAX:
        part = conn.recv(4096)
        if not part:
            return None
        data += part
    return data


def answer(conn, text):
    body = text.encode()
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n"
                 b"Connection: close\r\n\r\n%s" % (len(body), body))


def serve(conn, args, deadline):
    try:
        head = read_head(conn)
        if head is None:
            return
        line = head.split(b"\r\n", 1)[0].decode("utf-8", "replace")
        with args.lock:
            with open(args.log, "a") as f:
                f.write(json.dumps({"line": line}) + "\n")
        parts = line.split(" ")
        path = parts[1] if len(parts) > 1 else ""
        if path.startswith("/hold/"):
            name = os.path.basename(path[len("/hold/"):])
            while not os.path.exists(os.path.join(args.release_dir, name)):
                if time.monotonic() > deadline:
                    return
                time.sleep(0.05)
            answer(conn, "released %s\n" % name)
        elif path == "/ok":
            answer(conn, "ok\n")
        else:
            # Says nothing, and keeps the connection whatever the peer does (a relay that waits
            # for the upstream's end of file waits here until the upstream ends).
            time.sleep(max(0.0, deadline - time.monotonic()))
    except OSError:
        pass
    finally:
        conn.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--log", required=True)
    ap.add_argument("--release-dir", required=True)
    ap.add_argument("--max-seconds", type=int, default=240)
    args = ap.parse_args()
    args.lock = threading.Lock()
    deadline = time.monotonic() + args.max_seconds
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(1024)
    srv.settimeout(1.0)
    print(srv.getsockname()[1], flush=True)
    while time.monotonic() < deadline:
        try:
            conn, _ = srv.accept()
        except socket.timeout:
            continue
        threading.Thread(target=serve, args=(conn, args, deadline), daemon=True).start()


if __name__ == "__main__":
    main()
