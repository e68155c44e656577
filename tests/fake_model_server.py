#!/usr/bin/env python3
"""A fake model server speaking the real OpenAI Chat Completions and Anthropic Messages wire
formats, plain and streaming (SSE), for the providers' tests. Python standard library only.

    fake_model_server.py --script FILE --log FILE [--port N] [--key KEY] [--max-seconds N]

Listens on 127.0.0.1 (port 0 picks a free one) and prints the port, alone, on the first line of
stdout. POST .../chat/completions answers in the OpenAI format, POST .../messages in the Anthropic
one; a request with "stream": true gets Server-Sent Events (chunked), unless the entry says
otherwise. Each request takes the next entry of the script, a JSON list (or {"responses": [...]});
when the script is used up the answer is a 500. Entry fields, all optional:

    status         HTTP status (200)
    headers        extra response headers, e.g. {"Retry-After": "1"}
    delay          seconds to wait before answering
    body           a raw body sent as is (content_type, default application/json)
    content_type   with body, its type; with a stream, the stream's (text/event-stream)
    error          a message: an error body in the provider's format, with status (default 500)
    text           the assistant's text
    tool_calls     [{"id": "call_a" (absent or null: no id), "name": "shell",
                     "arguments": "raw string" (OpenAI; Anthropic streams it as partial_json and,
                     plain, sends json.loads of it), "input": {...} (Anthropic, plain)}]
    finish_reason  the provider's word (OpenAI finish_reason, Anthropic stop_reason)
    usage          {"input": N, "output": N, "cached": N}; null leaves usage out
    pad_bytes      N bytes of padding: a JSON field when plain, SSE comment lines when streaming
    long_line      streaming: one data line of N bytes
    stream         true/false forces streaming or not, whatever the request said
    chunk_delay    streaming: seconds between events
    stall_after    streaming: seconds to wait after the first event (once it is sent, the line
                   "first_event_sent" is appended to LOG.progress)
    no_index       OpenAI streaming: tool call deltas without "index"
    no_done        streaming: leave out data: [DONE] / message_stop (and the finish)
    stream_error   streaming: after the first event, an error event with this message, and the end
    error_type     with error: the provider's error type (and OpenAI's code), e.g.
                   "insufficient_quota", "overloaded_error"
    refusal        a refusal text: OpenAI message.refusal (delta.refusal when streaming);
                   Anthropic stop_reason "refusal" with the text as content
    pieces         streaming: how many deltas the text is split into (3)
    hold_open      streaming: seconds to keep the connection open after the complete answer
    keep_alive     true: the connection stays open for the next request (by default every answer
                   says "Connection: close")
    cut_after      streaming: send this many events, then drop the connection (no end chunk)
    interleave     OpenAI streaming: the deltas of the tool calls alternate between indices
    echo           true: the text is "echo: " and the text of the request's last user message (a
                   marker each concurrent caller puts in its request comes back in its answer)
    gather         N: the request waits until N such requests have arrived (requests are counted
                   in groups of N) before it is answered, so N callers are really at the server at
                   once; after 30 s without the group complete the answer is a 500
    drop_after     true: the connection is closed once the answer is sent, without saying
                   "Connection: close" (a keep-alive the server dropped between two calls)
    usage also takes "cache_write", "cache_write_1h" (Anthropic) and "reasoning" (OpenAI)

Every request is appended to the log as one JSON line before it is answered: n, conn (the TCP
connection it came on: 1 for the first accepted, 2 for the second...), accepted (how many
connections the server had accepted by then), method, path,
headers (lowercased; authorization and x-api-key values replaced by "<redacted>"), auth_present,
auth_ok (the key matched --key; null when no --key was given), body (parsed JSON, or the raw text
under body_raw). The server exits after --max-seconds (default 120) or on SIGTERM.
With --tls CERT KEY it speaks HTTPS (PEM files) instead of plain HTTP.
"""

import argparse
import json
import os
import signal
import socketserver
import ssl
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer


class Server(socketserver.ThreadingMixIn, HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


STATE = {"script": [], "next": 0, "n": 0, "conns": 0, "log": None, "key": None, "gathered": 0}
LOCK = threading.Lock()
GATHER = threading.Condition()


def gather(n):
    """Waits until the group of n requests this one belongs to is complete. False after 30 s."""
    with GATHER:
        STATE["gathered"] += 1
        group_end = ((STATE["gathered"] - 1) // n + 1) * n
        GATHER.notify_all()
        return GATHER.wait_for(lambda: STATE["gathered"] >= group_end, timeout=30)


def last_user_text(body):
    """The text of the last user message of an OpenAI or Anthropic request ("" when none)."""
    for m in reversed(body.get("messages") or []):
        if isinstance(m, dict) and m.get("role") == "user":
            c = m.get("content")
            if isinstance(c, str):
                return c
            if isinstance(c, list):
                return "".join(b.get("text", "") for b in c if isinstance(b, dict))
    return ""


def usage_of(entry):
    u = entry.get("usage", {"input": 10, "output": 5, "cached": 0})
    return u


def split(s, parts=3):
    """Splits s into up to `parts` pieces, so deltas really have to be concatenated."""
    if not s:
        return [s]
    step = max(1, (len(s) + parts - 1) // parts)
    return [s[i:i + step] for i in range(0, len(s), step)]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # The headers and the body are two writes: without TCP_NODELAY the body waits for the
    # client's delayed ACK (40 ms) on a kept connection.
    disable_nagle_algorithm = True

    def log_message(self, fmt, *args):  # quiet: the request log is the record
        pass

    def setup(self):  # once per accepted connection, which may carry many requests
        super().setup()
        with LOCK:
            STATE["conns"] += 1
            self.conn = STATE["conns"]

    def do_GET(self):
        self.send_json(404, {"error": {"message": "not found", "type": "invalid_request_error"}})

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        anthropic = self.path.rstrip("/").endswith("/messages")
        with LOCK:
            STATE["n"] += 1
            n = STATE["n"]
            idx = STATE["next"]
            STATE["next"] += 1
            entry = STATE["script"][idx] if idx < len(STATE["script"]) else None
            self.record(n, raw, anthropic)
        try:
            body = json.loads(raw.decode("utf-8"))
        except ValueError:
            body = {}
        if entry is None:
            self.send_error_body(500, "fake server: script exhausted", anthropic)
            return
        self.keep_alive = bool(entry.get("keep_alive") or entry.get("drop_after"))
        if entry.get("gather") and not gather(int(entry["gather"])):
            self.send_error_body(500, "fake server: gather timed out", anthropic)
            return
        if entry.get("echo"):
            entry = dict(entry, text="echo: " + last_user_text(body))
        if entry.get("delay"):
            time.sleep(float(entry["delay"]))
        try:
            self.answer(entry, body, anthropic)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (cancel, deadline, size cap): that is the point
        if entry.get("drop_after"):
            self.close_connection = True  # after an answer that said nothing of it

    def record(self, n, raw, anthropic):
        headers = {}
        for k, v in self.headers.items():
            k = k.lower()
            headers[k] = "<redacted>" if k in ("authorization", "x-api-key") else v
        if anthropic:
            got = self.headers.get("x-api-key")
            want = STATE["key"]
        else:
            got = self.headers.get("Authorization")
            want = "Bearer " + STATE["key"] if STATE["key"] is not None else None
        rec = {"n": n, "conn": self.conn, "accepted": STATE["conns"], "method": self.command,
               "path": self.path, "headers": headers,
               "auth_present": got is not None,
               "auth_ok": (got == want) if want is not None else None}
        try:
            rec["body"] = json.loads(raw.decode("utf-8"))
        except ValueError:
            rec["body_raw"] = raw.decode("utf-8", "replace")
        STATE["log"].write(json.dumps(rec) + "\n")
        STATE["log"].flush()

    # ---- plumbing ----

    def send_bytes(self, status, data, ctype="application/json", extra=None):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        if not getattr(self, "keep_alive", False):
            self.send_header("Connection", "close")
        for k, v in (extra or {}).items():
            self.send_header(k, str(v))
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()
        self.close_connection = not getattr(self, "keep_alive", False)

    def send_json(self, status, obj, extra=None):
        self.send_bytes(status, json.dumps(obj).encode(), extra=extra)

    def send_error_body(self, status, message, anthropic, extra=None, etype=None):
        if anthropic:
            obj = {"type": "error", "error": {"type": etype or "api_error", "message": message}}
        else:
            obj = {"error": {"message": message, "type": etype or "server_error",
                             "code": etype}}
        self.send_json(status, obj, extra)

    def start_stream(self, extra, ctype="text/event-stream"):
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        if not getattr(self, "keep_alive", False):
            self.send_header("Connection", "close")
        for k, v in (extra or {}).items():
            self.send_header(k, str(v))
        self.end_headers()
        self.close_connection = not getattr(self, "keep_alive", False)

    def chunk(self, data):
        if isinstance(data, str):
            data = data.encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def end_stream(self, entry=None):
        if entry and entry.get("hold_open"):
            # The answer is complete; a client that waits for the close waits this long.
            time.sleep(float(entry["hold_open"]))
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def send_events(self, entry, chunks):
        """Sends SSE chunks, pausing as the entry says; with cut_after, drops the connection
        after that many, without the end chunk. Returns False when it cut."""
        for k, c in enumerate(chunks):
            if entry.get("cut_after") is not None and k >= int(entry["cut_after"]):
                self.close_connection = True
                self.wfile.flush()
                self.connection.shutdown(2)
                return False
            self.chunk(c)
            self.event_pause(entry, k == 0)
        return True

    # ---- answers ----

    def answer(self, entry, body, anthropic):
        extra = entry.get("headers", {})
        status = entry.get("status", 200)
        if "body" in entry:
            self.send_bytes(status, entry["body"].encode(), entry.get("content_type",
                                                                      "application/json"), extra)
            return
        if "error" in entry:
            self.send_error_body(entry.get("status", 500), entry["error"], anthropic, extra,
                                 entry.get("error_type"))
            return
        stream = entry.get("stream")
        if stream is None:
            stream = bool(body.get("stream"))
        if anthropic:
            if stream:
                self.anthropic_stream(entry, extra)
            else:
                self.send_json(status, self.anthropic_plain(entry, body), extra)
        else:
            if stream:
                include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
                self.openai_stream(entry, extra, include_usage)
            else:
                self.send_json(status, self.openai_plain(entry, body), extra)

    def openai_usage(self, entry):
        u = usage_of(entry)
        if u is None:
            return None
        out = {"prompt_tokens": u.get("input", 0), "completion_tokens": u.get("output", 0),
               "total_tokens": u.get("input", 0) + u.get("output", 0),
               "prompt_tokens_details": {"cached_tokens": u.get("cached", 0)}}
        if "reasoning" in u:
            out["completion_tokens_details"] = {"reasoning_tokens": u["reasoning"]}
        return out

    def openai_plain(self, entry, body):
        msg = {"role": "assistant", "content": entry.get("text")}
        if entry.get("refusal") is not None:
            msg["refusal"] = entry["refusal"]
        calls = entry.get("tool_calls") or []
        if calls:
            msg["tool_calls"] = []
            for c in calls:
                tc = {"type": "function",
                      "function": {"name": c["name"], "arguments": c.get("arguments", "{}")}}
                if c.get("id") is not None:
                    tc["id"] = c["id"]
                msg["tool_calls"].append(tc)
        finish = entry.get("finish_reason", "tool_calls" if calls else "stop")
        out = {"id": "chatcmpl-fake", "object": "chat.completion", "created": int(time.time()),
               "model": body.get("model", "fake"),
               "choices": [{"index": 0, "message": msg, "finish_reason": finish}]}
        u = self.openai_usage(entry)
        if u is not None:
            out["usage"] = u
        if entry.get("pad_bytes"):
            out["x_padding"] = "a" * int(entry["pad_bytes"])
        return out

    def event_pause(self, entry, first):
        if first and entry.get("stall_after"):
            # Tells a test that the first event is on the wire (LOG.progress), so it can act on a
            # client that has it, without guessing with a sleep.
            with LOCK, open(STATE["log_path"] + ".progress", "a") as f:
                f.write("first_event_sent\n")
            time.sleep(float(entry["stall_after"]))
        elif entry.get("chunk_delay"):
            time.sleep(float(entry["chunk_delay"]))

    def stream_padding(self, entry):
        pad = int(entry.get("pad_bytes") or 0)
        line = ": " + "p" * 65534 + "\n"
        while pad > 0:
            self.chunk(line)
            pad -= len(line)
        if entry.get("long_line"):
            self.chunk("data: " + "x" * int(entry["long_line"]) + "\n\n")

    def openai_stream(self, entry, extra, include_usage):
        self.start_stream(extra, entry.get("content_type", "text/event-stream"))
        base = {"id": "chatcmpl-fake", "object": "chat.completion.chunk",
                "created": int(time.time()), "model": "fake"}
        events = []

        def ev(delta, finish=None):
            e = dict(base)
            e["choices"] = [{"index": 0, "delta": delta, "finish_reason": finish}]
            events.append(e)

        ev({"role": "assistant", "content": ""})
        pieces = int(entry.get("pieces", 3))
        for piece in split(entry.get("text") or "", pieces):
            if piece:
                ev({"content": piece})
        if entry.get("refusal") is not None:
            for piece in split(entry["refusal"], pieces):
                ev({"refusal": piece})
        call_events = []
        for i, c in enumerate(entry.get("tool_calls") or []):
            mine = []
            first = {"type": "function", "function": {"name": c["name"], "arguments": ""}}
            if not entry.get("no_index"):
                first["index"] = i
            if c.get("id") is not None:
                first["id"] = c["id"]
            mine.append({"tool_calls": [first]})
            for piece in split(c.get("arguments", "{}")):
                d = {"function": {"arguments": piece}}
                if not entry.get("no_index"):
                    d["index"] = i
                mine.append({"tool_calls": [d]})
            call_events.append(mine)
        if entry.get("interleave"):
            # one delta of each call in turn: 0, 1, 0, 1...
            k = 0
            while any(k < len(m) for m in call_events):
                for m in call_events:
                    if k < len(m):
                        ev(m[k])
                k += 1
        else:
            for m in call_events:
                for d in m:
                    ev(d)
        calls = entry.get("tool_calls") or []
        if not entry.get("no_done"):
            ev({}, entry.get("finish_reason", "tool_calls" if calls else "stop"))
        u = self.openai_usage(entry)
        if include_usage and u is not None and not entry.get("no_done"):
            e = dict(base)
            e["choices"] = []
            e["usage"] = u
            events.append(e)
        self.stream_padding(entry)
        if entry.get("stream_error"):
            events = events[:1]
            events.append({"error": {"message": entry["stream_error"], "type": "server_error"}})
        chunks = ["data: " + json.dumps(e) + "\n\n" for e in events]
        if not entry.get("no_done") and not entry.get("stream_error"):
            chunks.append("data: [DONE]\n\n")
        if self.send_events(entry, chunks):
            self.end_stream(entry)

    def anthropic_usage(self, entry):
        u = usage_of(entry)
        if u is None:
            return None
        out = {"input_tokens": u.get("input", 0), "output_tokens": u.get("output", 0),
               "cache_read_input_tokens": u.get("cached", 0),
               "cache_creation_input_tokens": u.get("cache_write", 0) + u.get("cache_write_1h", 0)}
        if "cache_write_1h" in u:
            out["cache_creation"] = {"ephemeral_5m_input_tokens": u.get("cache_write", 0),
                                     "ephemeral_1h_input_tokens": u["cache_write_1h"]}
        return out

    def anthropic_plain(self, entry, body):
        content = []
        text = entry.get("text")
        if entry.get("refusal") is not None:
            text = entry["refusal"]
        if text is not None:
            content.append({"type": "text", "text": text})
        calls = entry.get("tool_calls") or []
        for c in calls:
            if "input" in c:
                inp = c["input"]
            else:
                try:
                    inp = json.loads(c.get("arguments", "{}"))
                except ValueError:
                    inp = c.get("arguments")
            b = {"type": "tool_use", "name": c["name"], "input": inp}
            if c.get("id") is not None:
                b["id"] = c["id"]
            content.append(b)
        out = {"id": "msg_fake", "type": "message", "role": "assistant",
               "model": body.get("model", "fake"), "content": content,
               "stop_reason": entry.get("finish_reason", "refusal" if entry.get("refusal")
                                        is not None else "tool_use" if calls else "end_turn"),
               "stop_sequence": None}
        u = self.anthropic_usage(entry)
        if u is not None:
            out["usage"] = u
        if entry.get("pad_bytes"):
            out["x_padding"] = "a" * int(entry["pad_bytes"])
        return out

    def anthropic_stream(self, entry, extra):
        self.start_stream(extra, entry.get("content_type", "text/event-stream"))
        u = self.anthropic_usage(entry)
        events = []

        def ev(name, obj):
            obj = dict(obj)
            obj["type"] = name
            events.append((name, obj))

        start_usage = None
        if u is not None:
            start_usage = dict(u)
            start_usage["output_tokens"] = 1
        msg = {"id": "msg_fake", "type": "message", "role": "assistant", "content": [],
               "model": "fake", "stop_reason": None, "stop_sequence": None}
        if start_usage is not None:
            msg["usage"] = start_usage
        ev("message_start", {"message": msg})
        ev("ping", {})
        index = 0
        text = entry.get("text")
        if entry.get("refusal") is not None:
            text = entry["refusal"]
        if text is not None:
            ev("content_block_start", {"index": index, "content_block": {"type": "text",
                                                                          "text": ""}})
            for piece in split(text, int(entry.get("pieces", 3))):
                ev("content_block_delta", {"index": index,
                                           "delta": {"type": "text_delta", "text": piece}})
            ev("content_block_stop", {"index": index})
            index += 1
        calls = entry.get("tool_calls") or []
        for c in calls:
            block = {"type": "tool_use", "name": c["name"], "input": {}}
            if c.get("id") is not None:
                block["id"] = c["id"]
            ev("content_block_start", {"index": index, "content_block": block})
            args = c.get("arguments")
            if args is None:
                args = json.dumps(c.get("input", {}))
            for piece in split(args):
                ev("content_block_delta", {"index": index, "delta": {"type": "input_json_delta",
                                                                     "partial_json": piece}})
            ev("content_block_stop", {"index": index})
            index += 1
        if not entry.get("no_done"):
            stop = entry.get("finish_reason", "refusal" if entry.get("refusal") is not None
                             else "tool_use" if calls else "end_turn")
            delta = {"delta": {"stop_reason": stop, "stop_sequence": None}}
            if u is not None:
                delta["usage"] = {"output_tokens": u["output_tokens"]}
            ev("message_delta", delta)
            ev("message_stop", {})
        self.stream_padding(entry)
        if entry.get("stream_error"):
            events = events[:1]
            events.append(("error", {"type": "error", "error": {"type": "overloaded_error",
                                                                "message": entry["stream_error"]}}))
        chunks = ["event: %s\ndata: %s\n\n" % (name, json.dumps(obj)) for name, obj in events]
        if self.send_events(entry, chunks):
            self.end_stream(entry)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--script", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--key", default=None)
    ap.add_argument("--max-seconds", type=float, default=120)
    ap.add_argument("--tls", nargs=2, metavar=("CERT", "KEY"), default=None)
    args = ap.parse_args()

    with open(args.script) as f:
        script = json.load(f)
    if isinstance(script, dict):
        script = script.get("responses", [])
    STATE["script"] = script
    STATE["key"] = args.key
    STATE["log"] = open(args.log, "a")
    STATE["log_path"] = args.log

    # os._exit: daemon threads may be asleep in a slow answer; nothing needs to be flushed but
    # the log, which is flushed after every line.
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    signal.signal(signal.SIGINT, lambda *_: os._exit(0))

    def give_up():
        time.sleep(args.max_seconds)
        sys.stderr.write("fake_model_server: --max-seconds reached, exiting\n")
        os._exit(0)

    threading.Thread(target=give_up, daemon=True).start()

    srv = Server(("127.0.0.1", args.port), Handler)
    if args.tls:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(args.tls[0], args.tls[1])
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    sys.stdout.write("%d\n" % srv.server_address[1])
    sys.stdout.flush()
    srv.serve_forever(poll_interval=0.1)


if __name__ == "__main__":
    main()
