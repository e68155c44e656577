"""The client: one HTTP request per call on the standard library's http.client, with retries,
timeouts, size caps on everything the server sends, and the API's resources."""

import http.client
import json
import os
import random
import socket
import ssl
import time
import urllib.parse
import uuid
from email.utils import parsedate_to_datetime
from typing import (
    Any,
    Callable,
    Dict,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Union,
)

from ._errors import APIConnectionError, APIError, APITimeoutError, NotFoundError, error_class
from ._object import EphemeralObject, loads
from ._operations import OPERATIONS

__version__ = "0.1.0"

DEFAULT_BASE_URL = "http://127.0.0.1:8080"
DEFAULT_TIMEOUT = 60.0
DEFAULT_MAX_RETRIES = 2
DEFAULT_MAX_RETRY_WAIT = 60.0
# What the client reads of one answer: a JSON body, or one line of a stream (an SSE line or a
# transcript line; the server's own cap on a transcript line is 32 MiB).
MAX_BODY_BYTES = 64 * 1024 * 1024
MAX_LINE_BYTES = 64 * 1024 * 1024
# The longest the server parks a `Prefer: wait` (docs/API.md).
MAX_WAIT_SECONDS = 600
# Codes of a 503 that a retry cannot cure: the model's key is unset on the server.
_PERMANENT_CODES = frozenset({"model_unavailable"})
# The operations that take no key (the operator's).
_NO_KEY = frozenset({"health", "healthHead", "metrics", "metricsHead"})
TERMINAL_STATUSES = frozenset(
    {"completed", "failed", "timed_out", "budget_exhausted", "cancelled"}
)
FINAL_EVENT = "worker.destroyed"

QueryValue = Union[str, int, None, Mapping[str, str]]


def _env(name: str) -> Optional[str]:
    value = os.environ.get(name)
    return value if value else None


class _Answer:
    """An answer whose status is below 400, with its connection still open for the body."""

    def __init__(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse):
        self.conn = conn
        self.resp = resp
        self.status = resp.status
        self.headers: Dict[str, str] = {k.lower(): v for k, v in resp.getheaders()}

    def read_body(self) -> bytes:
        try:
            data = self.resp.read(MAX_BODY_BYTES + 1)
        except (OSError, http.client.HTTPException) as exc:
            raise _transport_error(exc, "reading the answer") from exc
        finally:
            self.conn.close()
        if len(data) > MAX_BODY_BYTES:
            raise APIConnectionError(f"the answer is over {MAX_BODY_BYTES} bytes")
        return data

    def lines(self) -> Iterator[bytes]:
        """The body line by line (each without its end of line), each capped."""
        while True:
            line = self.resp.readline(MAX_LINE_BYTES + 1)
            if not line:
                return
            if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
                raise APIConnectionError(f"a line of the answer is over {MAX_LINE_BYTES} bytes")
            yield line.rstrip(b"\r\n")

    def close(self) -> None:
        self.conn.close()


def _transport_error(exc: BaseException, doing: str) -> APIConnectionError:
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return APITimeoutError(f"timed out {doing}")
    return APIConnectionError(f"connection failed {doing}: {exc.__class__.__name__}: {exc}")


def _json_body(data: bytes) -> Any:
    try:
        return loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise APIConnectionError(f"the answer is not JSON: {exc}") from exc


def _api_error(status: int, headers: Mapping[str, str], data: bytes, reason: str) -> APIError:
    body: Optional[Dict[str, Any]] = None
    try:
        parsed = json.loads(data.decode("utf-8"))
        if isinstance(parsed, dict):
            body = parsed
    except (UnicodeDecodeError, ValueError):
        pass
    err = body.get("error") if body else None
    request_id = headers.get("request-id")
    if isinstance(err, dict):
        fields: Dict[str, Any] = err

        def text(key: str) -> Optional[str]:
            value = fields.get(key)
            return value if isinstance(value, str) else None

        message = text("message") or reason or f"HTTP {status}"
        return error_class(status, text("code"))(
            status,
            message,
            type=text("type"),
            code=text("code"),
            param=text("param"),
            request_id=text("request_id") or request_id,
            headers=headers,
            body=body,
        )
    # Not the API's error shape (a proxy's page, libmicrohttpd's own answers).
    return error_class(status)(
        status,
        f"HTTP {status} {reason}".strip(),
        type="api_error" if status >= 500 else None,
        request_id=request_id,
        headers=headers,
        body=body,
    )


def _retry_after(headers: Mapping[str, str]) -> Optional[float]:
    value = headers.get("retry-after")
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - time.time())


def _check_wait(wait: Optional[int]) -> Optional[int]:
    if wait is None:
        return None
    if isinstance(wait, bool) or not isinstance(wait, int) or not 0 <= wait <= MAX_WAIT_SECONDS:
        raise ValueError(f"wait must be an integer from 0 to {MAX_WAIT_SECONDS} (seconds)")
    return wait


class Client:
    """A client of one Ephemeral server.

    ``base_url`` defaults to ``EPHEMERAL_URL`` (else http://127.0.0.1:8080), ``api_key`` to
    ``EPHEMERAL_API_KEY``. ``timeout`` bounds the connect and each read, in seconds (a long poll
    adds its wait). ``max_retries`` is how many times a request is sent again after a 429 or a
    503 (after the server's Retry-After, at most ``max_retry_wait`` seconds), and after a
    connection failure when the request is safe to repeat (a GET, or a POST with an
    idempotency key); an event stream resumes that many times in a row without progress.
    """

    def __init__(
        self,
        base_url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        max_retries: int = DEFAULT_MAX_RETRIES,
        max_retry_wait: float = DEFAULT_MAX_RETRY_WAIT,
        ssl_context: Optional[ssl.SSLContext] = None,
    ) -> None:
        url = base_url or _env("EPHEMERAL_URL") or DEFAULT_BASE_URL
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("base_url must be an http:// or https:// URL with a host")
        if parts.username or parts.password:
            raise ValueError("base_url must not hold a user or a password: use api_key")
        if parts.query or parts.fragment:
            raise ValueError("base_url must not have a query or a fragment")
        key = api_key if api_key is not None else _env("EPHEMERAL_API_KEY")
        if key is not None and (not key or any(not 0x21 <= ord(c) <= 0x7E for c in key)):
            raise ValueError("api_key must be printable ASCII without spaces")
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        if max_retries < 0:
            raise ValueError("max_retries must not be negative")
        self.base_url = url.rstrip("/")
        self.api_key = key
        self.timeout = float(timeout)
        self.max_retries = int(max_retries)
        self.max_retry_wait = float(max_retry_wait)
        self._scheme = parts.scheme
        self._host = parts.hostname
        self._port = parts.port
        self._prefix = parts.path.rstrip("/")
        self._ssl_context = ssl_context
        # How the client waits between attempts; tests replace it to see the waits.
        self._sleep: Callable[[float], None] = time.sleep
        self.runs = Runs(self)
        self.models = Models(self)
        self.keys = Keys(self)
        self.connections = Connections(self)
        self.images = Images(self)
        self.webhooks = Webhooks(self)
        self.credits = Credits(self)
        self.sandboxes = Sandboxes(self)

    def __repr__(self) -> str:
        return f"Client(base_url={self.base_url!r})"  # never the key

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Nothing is kept open between calls; here for symmetry and `with`."""

    # -- account and operations -------------------------------------------------------------

    def balance(self) -> EphemeralObject:
        """The organization's balance: balance_micros, reserved_micros, available_micros."""
        result: EphemeralObject = self._json("getBalance")
        return result

    def health(self) -> EphemeralObject:
        """GET /healthz (no key): the readiness report, also when it says unavailable (503)."""
        try:
            result: EphemeralObject = self._json("health", auth=False)
            return result
        except APIError as exc:
            if exc.status == 503 and isinstance(exc.body, dict) and "status" in exc.body:
                return loads(json.dumps(exc.body))  # type: ignore[no-any-return]
            raise

    def metrics(self) -> str:
        """GET /metrics (no key): the Prometheus text."""
        answer = self._request("metrics", auth=False, accept="text/plain")
        return answer.read_body().decode("utf-8", "replace")

    def head(
        self,
        operation_id: str,
        *,
        path: Optional[Mapping[str, str]] = None,
        query: Optional[Mapping[str, QueryValue]] = None,
    ) -> EphemeralObject:
        """The HEAD of an operation (``listRunsHead``, ``getRunHead``, ...): ``status`` and
        ``headers`` (lower-case names) of what its GET would answer, without the body. An
        error status raises APIError, as the GET's would (with no message from the server)."""
        if OPERATIONS.get(operation_id, ("", ""))[0] != "HEAD":
            raise ValueError(f"{operation_id!r} is not a HEAD operation of the API")
        answer = self._request(operation_id, path=path, query=query,
                               auth=operation_id not in _NO_KEY)
        answer.close()
        return EphemeralObject(status=answer.status, headers=dict(answer.headers))

    # -- transport ----------------------------------------------------------------------------

    def _url_path(self, op: str, path: Optional[Mapping[str, str]], query: Optional[Mapping[str, QueryValue]]) -> Tuple[str, str]:
        method, template = OPERATIONS[op]
        target = template
        for name, segment in (path or {}).items():
            if not isinstance(segment, str) or not segment:
                raise ValueError(f"{name} must be a non-empty string")
            # a sandbox file's path keeps its slashes (files//tmp/x is the absolute /tmp/x)
            keep = "/" if name == "path" else ""
            target = target.replace("{" + name + "}", urllib.parse.quote(segment, safe=keep))
        if "{" in target:
            raise ValueError(f"{op}: a path parameter is missing")
        pairs: List[Tuple[str, str]] = []
        for name, value in (query or {}).items():
            if value is None:
                continue
            if isinstance(value, Mapping):
                for k, v in value.items():
                    pairs.append((f"{name}[{k}]", str(v)))
            elif isinstance(value, bool):
                pairs.append((name, "true" if value else "false"))
            else:
                pairs.append((name, str(value)))
        target = self._prefix + target
        if pairs:
            target += "?" + urllib.parse.urlencode(pairs, quote_via=urllib.parse.quote)
        return method, target

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        if self._scheme == "https":
            return http.client.HTTPSConnection(
                self._host, self._port, timeout=timeout,
                context=self._ssl_context or ssl.create_default_context(),
            )
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def _backoff(self, attempt: int) -> float:
        base = min(self.max_retry_wait, 0.5 * 2.0 ** attempt)
        return base / 2 + random.uniform(0, base / 2)

    def _request(
        self,
        op: str,
        *,
        path: Optional[Mapping[str, str]] = None,
        query: Optional[Mapping[str, QueryValue]] = None,
        body: Any = None,
        raw: Optional[bytes] = None,
        headers: Optional[Mapping[str, str]] = None,
        auth: bool = True,
        accept: str = "application/json",
        timeout: Optional[float] = None,
        safe: Optional[bool] = None,
    ) -> _Answer:
        """Sends one operation, with its retries; answers below 400, raises APIError above."""
        method, target = self._url_path(op, path, query)
        send_headers: Dict[str, str] = {
            "Accept": accept,
            "User-Agent": f"ephemeral-python/{__version__}",
        }
        if auth and self.api_key:
            send_headers["Authorization"] = f"Bearer {self.api_key}"
        data: Optional[bytes] = None
        if body is not None:
            data = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
            send_headers["Content-Type"] = "application/json"
        elif raw is not None:
            data = bytes(raw)
            send_headers["Content-Type"] = "application/octet-stream"
        send_headers.update(headers or {})
        if safe is None:
            safe = method in ("GET", "HEAD") or "Idempotency-Key" in send_headers
        read_timeout = timeout if timeout is not None else self.timeout
        attempt = 0
        while True:
            conn = self._connection(read_timeout)
            try:
                conn.request(method, target, body=data, headers=send_headers)
                resp = conn.getresponse()
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                if safe and attempt < self.max_retries:
                    self._sleep(self._backoff(attempt))
                    attempt += 1
                    continue
                raise _transport_error(exc, f"on {method} {OPERATIONS[op][1]}") from exc
            answer = _Answer(conn, resp)
            if resp.status < 400:
                return answer
            raw = answer.read_body()
            error = _api_error(resp.status, answer.headers, raw, resp.reason)
            if (
                resp.status in (429, 503)
                and attempt < self.max_retries
                and error.code not in _PERMANENT_CODES
            ):
                wait = _retry_after(answer.headers)
                if wait is None:
                    wait = self._backoff(attempt)
                self._sleep(min(wait, self.max_retry_wait))
                attempt += 1
                continue
            raise error

    def _json(self, op: str, **kwargs: Any) -> Any:
        return _json_body(self._request(op, **kwargs).read_body())


class Runs:
    """``client.runs``: create, get, wait, list, events, cancel, transcript."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def create(
        self,
        *,
        idempotency_key: Optional[str] = None,
        wait: Optional[int] = None,
        **fields: Any,
    ) -> EphemeralObject:
        """POST /v1/runs with the body fields (prompt, max_cost_micros, model, shell, web,
        connections, files, timeout_seconds, zero_data_retention, metadata, replay_of).

        An Idempotency-Key is always sent (a new UUID unless given), so a retry after a lost
        answer creates nothing more. ``wait`` (seconds, ≤ 600) asks the server to answer once
        the run is terminal or the wait is over.
        """
        wait = _check_wait(wait)
        key = idempotency_key if idempotency_key is not None else str(uuid.uuid4())
        headers = {"Idempotency-Key": key}
        if wait is not None:
            headers["Prefer"] = f"wait={wait}"
        result: EphemeralObject = self._client._json(
            "createRun", body=fields, headers=headers,
            timeout=self._client.timeout + (wait or 0),
        )
        return result

    def get(self, id: str, *, wait: Optional[int] = None) -> EphemeralObject:
        """GET /v1/runs/{id}; ``wait`` long-polls up to that many seconds for a terminal state."""
        wait = _check_wait(wait)
        headers = {"Prefer": f"wait={wait}"} if wait is not None else {}
        result: EphemeralObject = self._client._json(
            "getRun", path={"id": id}, headers=headers,
            timeout=self._client.timeout + (wait or 0),
        )
        return result

    def exists(self, id: str) -> bool:
        """HEAD /v1/runs/{id}: whether the key's organization has this run."""
        try:
            self._client.head("getRunHead", path={"id": id})
        except NotFoundError:
            return False
        return True

    def wait(self, id: str, *, timeout: Optional[float] = None) -> EphemeralObject:
        """The run once it is terminal (long polls of up to 600 s), or as it is after
        ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = MAX_WAIT_SECONDS if deadline is None else max(0.0, deadline - time.monotonic())
            run = self.get(id, wait=int(min(MAX_WAIT_SECONDS, left)))
            if run.get("status") in TERMINAL_STATUSES or (deadline is not None and time.monotonic() >= deadline):
                return run

    def list(
        self,
        *,
        status: Optional[str] = None,
        metadata: Optional[Mapping[str, str]] = None,
        after: Optional[str] = None,
        limit: Optional[int] = None,
    ) -> Iterator[EphemeralObject]:
        """Every run, newest first, page after page (``limit`` is the page size, 1–100):
        ``status`` one status, ``metadata`` pairs the run's metadata must all hold, ``after`` a
        run id to start after."""
        if metadata is not None:
            for k, v in metadata.items():
                if not isinstance(k, str) or not isinstance(v, str):
                    raise ValueError("metadata keys and values must be strings")
        cursor = after
        while True:
            page = self._client._json(
                "listRuns",
                query={"limit": limit, "after": cursor, "status": status, "metadata": metadata},
            )
            data = page.get("data") or []
            yield from data
            if not page.get("has_more") or not data:
                return
            cursor = data[-1]["id"]

    def events(
        self, id: str, *, after: Optional[int] = None, follow: bool = True
    ) -> Iterator[EphemeralObject]:
        """The run's events. With ``follow`` (the default) a Server-Sent Events stream: past
        events, then live ones, to the end (the last is ``worker.destroyed``); a dropped stream
        is resumed with Last-Event-ID, so no event is lost or repeated. Without ``follow``, the
        events stored so far (one JSON request). ``after``: only events with a larger seq.

        A zero-data-retention run's follower also gets ``{"type": "result", "result": ...}``
        just before the end: the result is kept nowhere else.
        """
        if not follow:
            page = self._client._json("listRunEvents", path={"id": id}, query={"after": after})
            return iter(page.get("data") or [])
        return self._follow(id, after)

    def _follow(
        self, id: str, after: Optional[int], op: str = "listRunEvents",
        ended: Optional[Callable[[], bool]] = None,
    ) -> Iterator[EphemeralObject]:
        client = self._client
        if ended is None:
            ended = lambda: client.runs.get(id).get("status") in TERMINAL_STATUSES  # noqa: E731
        last = after
        failures = 0
        while True:
            headers = {"Accept": "text/event-stream"}
            if last is not None:
                headers["Last-Event-ID"] = str(last)
            # Keep-alives come every 15 s by default: a read that waits longer than the timeout
            # (at least 45 s) counts as a dropped stream and is resumed.
            answer = client._request(
                op, path={"id": id}, headers=headers,
                accept="text/event-stream", timeout=max(client.timeout, 45.0),
            )
            progressed = False
            clean = False
            try:
                for name, event_id, data in _sse_messages(answer.lines()):
                    event = loads(data) if data else EphemeralObject()
                    if not isinstance(event, EphemeralObject):
                        raise APIConnectionError("an event is not a JSON object")
                    if "type" not in event and name:
                        event["type"] = name
                    if event_id is not None:
                        try:
                            last = int(event_id)
                        except ValueError:
                            raise APIConnectionError("an event id is not a number") from None
                    progressed = True
                    yield event
                    if event.get("type") == FINAL_EVENT:
                        return
                clean = True
            except (OSError, http.client.HTTPException):
                pass
            except ValueError as exc:  # a data line that is not JSON
                raise APIConnectionError(f"an event is not JSON: {exc}") from exc
            finally:
                answer.close()
            if clean and not progressed:
                # Closed with nothing new: the end, if the run is over.
                if ended():
                    return
            failures = 0 if progressed else failures + 1
            if failures > client.max_retries:
                raise APIConnectionError(
                    f"the event stream of {id} ended before {FINAL_EVENT}, "
                    f"{failures} times in a row without a new event"
                )
            if not progressed:
                client._sleep(client._backoff(failures - 1))

    def cancel(self, id: str) -> EphemeralObject:
        """POST /v1/runs/{id}/cancel: answers the run once settled (or after 5 s); idempotent."""
        result: EphemeralObject = self._client._json(
            "cancelRun", path={"id": id}, body=None, safe=True,
            timeout=self._client.timeout + 5,
        )
        return result

    def transcript(self, id: str) -> Iterator[EphemeralObject]:
        """GET /v1/runs/{id}/transcript: the run's record, one object per JSON line, streamed."""
        answer = self._client._request(
            "getRunTranscript", path={"id": id}, accept="application/x-ndjson"
        )

        def lines() -> Iterator[EphemeralObject]:
            try:
                for line in answer.lines():
                    if line.strip():
                        yield loads(line.decode("utf-8"))
            except (OSError, http.client.HTTPException) as exc:
                raise _transport_error(exc, "reading the transcript") from exc
            except ValueError as exc:
                raise APIConnectionError(f"a transcript line is not JSON: {exc}") from exc
            finally:
                answer.close()

        return lines()


def _sse_messages(lines: Iterator[bytes]) -> Iterator[Tuple[str, Optional[str], str]]:
    """Server-Sent Events: (event name, id or None, data) for each message a blank line ends.
    A message cut short by a dropped connection is never given."""
    name = ""
    event_id: Optional[str] = None
    data: List[str] = []
    for raw in lines:
        line = raw.decode("utf-8", "replace")
        if not line:
            if data or name:
                yield name, event_id, "\n".join(data)
            name, event_id, data = "", None, []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if field == "data":
            data.append(value)
        elif field == "event":
            name = value
        elif field == "id" and "\0" not in value:
            event_id = value


class Models:
    """``client.models``."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def list(self) -> List[EphemeralObject]:
        """GET /v1/models: every configured model, with its prices and whether it is available."""
        return list(self._client._json("listModels").get("data") or [])


class Keys:
    """``client.keys`` (admin)."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def create(self, role: str = "member") -> EphemeralObject:
        """POST /v1/keys: the new key; its secret ``key`` is in this answer only."""
        result: EphemeralObject = self._client._json("createKey", body={"role": role})
        return result

    def list(self) -> List[EphemeralObject]:
        """GET /v1/keys: the organization's live keys (never a secret)."""
        return list(self._client._json("listKeys").get("data") or [])

    def revoke(self, id: str) -> EphemeralObject:
        """DELETE /v1/keys/{id}: the key gets 401 from then on."""
        result: EphemeralObject = self._client._json("revokeKey", path={"id": id})
        return result

    delete = revoke


class Connections:
    """``client.connections`` (admin)."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def create(
        self,
        name: str,
        base_url: str,
        *,
        methods: Optional[Sequence[str]] = None,
        path_prefixes: Optional[Sequence[str]] = None,
        headers: Optional[Mapping[str, str]] = None,
        query: Optional[Mapping[str, str]] = None,
    ) -> EphemeralObject:
        """POST /v1/connections. ``headers`` and ``query`` values are credentials: the server
        seals them and never shows them again."""
        body: Dict[str, Any] = {"name": name, "base_url": base_url}
        if methods is not None:
            body["methods"] = list(methods)
        if path_prefixes is not None:
            body["path_prefixes"] = list(path_prefixes)
        if headers is not None:
            body["headers"] = dict(headers)
        if query is not None:
            body["query"] = dict(query)
        result: EphemeralObject = self._client._json("createConnection", body=body)
        return result

    def list(self) -> List[EphemeralObject]:
        """GET /v1/connections."""
        return list(self._client._json("listConnections").get("data") or [])

    def get(self, name: str) -> EphemeralObject:
        """GET /v1/connections/{name} (a name or an id)."""
        result: EphemeralObject = self._client._json("getConnection", path={"name": name})
        return result

    def delete(self, name: str) -> EphemeralObject:
        """DELETE /v1/connections/{name} (a name or an id)."""
        result: EphemeralObject = self._client._json("deleteConnection", path={"name": name})
        return result


class Images:
    """``client.images``: the images runs may name (admin for create and delete;
    docs/IMAGES.md)."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def create(
        self,
        name: str,
        *,
        packages: Optional[Sequence[str]] = None,
        npm: Optional[Sequence[str]] = None,
        files: Optional[Sequence[Mapping[str, Any]]] = None,
        run: Optional[Sequence[str]] = None,
    ) -> EphemeralObject:
        """POST /v1/images: starts a build (202) and gives the image, ``status`` "building" (or
        "ready" when the same recipe was built before)."""
        body: Dict[str, Any] = {"name": name}
        if packages is not None:
            body["packages"] = list(packages)
        if npm is not None:
            body["npm"] = list(npm)
        if files is not None:
            body["files"] = [dict(f) for f in files]
        if run is not None:
            body["run"] = list(run)
        result: EphemeralObject = self._client._json("createImage", body=body)
        return result

    def list(self) -> List[EphemeralObject]:
        """GET /v1/images: the org's images and the operator's."""
        return list(self._client._json("listImages").get("data") or [])

    def get(self, name: str) -> EphemeralObject:
        """GET /v1/images/{name}."""
        result: EphemeralObject = self._client._json("getImage", path={"name": name})
        return result

    def delete(self, name: str) -> EphemeralObject:
        """DELETE /v1/images/{name} (409 while a run uses it)."""
        result: EphemeralObject = self._client._json("deleteImage", path={"name": name})
        return result

    def log(self, name: str) -> Iterator[str]:
        """GET /v1/images/{name}/log: the build's log, line by line, streamed until the build
        ends."""
        answer = self._client._request("getImageLog", path={"name": name}, accept="text/plain")

        def lines() -> Iterator[str]:
            try:
                for line in answer.lines():
                    yield line.decode("utf-8", errors="replace").rstrip("\n")
            except (OSError, http.client.HTTPException) as exc:
                raise _transport_error(exc, "reading the image's log") from exc
            finally:
                answer.close()

        return lines()


class Webhooks:
    """``client.webhooks`` (admin): endpoints that get a signed POST of each ended run's event
    (docs/WEBHOOKS.md); ``ephemeral.verify_signature`` checks one."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def create(
        self,
        url: str,
        *,
        events: Optional[Sequence[str]] = None,
        timeout_seconds: Optional[int] = None,
    ) -> EphemeralObject:
        """POST /v1/webhooks: the endpoint with its ``secret``, which is shown this once."""
        body: Dict[str, Any] = {"url": url}
        if events is not None:
            body["events"] = list(events)
        if timeout_seconds is not None:
            body["timeout_seconds"] = timeout_seconds
        result: EphemeralObject = self._client._json("createWebhook", body=body)
        return result

    def list(self) -> List[EphemeralObject]:
        """GET /v1/webhooks."""
        return list(self._client._json("listWebhooks").get("data") or [])

    def get(self, webhook_id: str) -> EphemeralObject:
        """GET /v1/webhooks/{id}."""
        result: EphemeralObject = self._client._json("getWebhook", path={"id": webhook_id})
        return result

    def delete(self, webhook_id: str) -> EphemeralObject:
        """DELETE /v1/webhooks/{id}: nothing more is sent to it."""
        result: EphemeralObject = self._client._json("deleteWebhook", path={"id": webhook_id})
        return result

    def deliveries(
        self, webhook_id: str, *, limit: Optional[int] = None, after: Optional[str] = None
    ) -> List[EphemeralObject]:
        """GET /v1/webhooks/{id}/deliveries: one page, the newest first, each with its last
        attempt; ``after`` (an event id) asks for the page after that delivery."""
        answer = self._client._json(
            "listWebhookDeliveries",
            path={"id": webhook_id},
            query={"limit": limit, "after": after},
        )
        return list(answer.get("data") or [])

    def delivery(self, webhook_id: str, event_id: str) -> EphemeralObject:
        """GET /v1/webhooks/{id}/deliveries/{event_id}: one delivery with ``history``, each
        attempt oldest first."""
        result: EphemeralObject = self._client._json(
            "getWebhookDelivery", path={"id": webhook_id, "event_id": event_id}
        )
        return result


class Credits:
    """``client.credits`` (admin)."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def add(self, micros: int, *, idempotency_key: Optional[str] = None) -> EphemeralObject:
        """POST /v1/credits: adds ``micros`` to the organization's balance and answers it.
        An Idempotency-Key is always sent, so a retry never credits twice."""
        if isinstance(micros, bool) or not isinstance(micros, int) or micros < 1:
            raise ValueError("micros must be a positive integer")
        key = idempotency_key if idempotency_key is not None else str(uuid.uuid4())
        result: EphemeralObject = self._client._json(
            "addCredit", body={"micros": micros}, headers={"Idempotency-Key": key}
        )
        return result


SANDBOX_ENDED = frozenset({"stopped", "timed_out", "budget_exhausted", "failed"})


def _command_stream(answer: _Answer) -> Iterator[EphemeralObject]:
    """A command's Server-Sent Events: ``{"type": "stdout" | "stderr", "text", "offset"}`` as it
    writes, then ``{"type": "exit", ...the command}``, the last."""
    try:
        for name, _, data in _sse_messages(answer.lines()):
            event = loads(data) if data else EphemeralObject()
            if not isinstance(event, EphemeralObject):
                raise APIConnectionError("a command event is not a JSON object")
            if name == "exit":
                event = EphemeralObject({"type": "exit", **event})
            else:
                event["type"] = name
            yield event
            if name == "exit":
                return
    except (OSError, http.client.HTTPException) as exc:
        raise _transport_error(exc, "reading a command's stream") from exc
    except ValueError as exc:
        raise APIConnectionError(f"a command event is not JSON: {exc}") from exc
    finally:
        answer.close()
    raise APIConnectionError("the command's stream ended before its exit event")


class Sandboxes:
    """``client.sandboxes``: sandboxes you drive (docs/SANDBOXES.md): create, get, list,
    delete, exec (waited, streamed, background), kill, files, events."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def create(
        self, *, idempotency_key: Optional[str] = None, wait: Optional[int] = None, **fields: Any
    ) -> EphemeralObject:
        """POST /v1/sandboxes (max_cost_micros, image, web, connections, files, timeout_seconds,
        idle_timeout_seconds, zero_data_retention, metadata). An Idempotency-Key is always sent
        (a new UUID unless given); ``wait`` answers once it is ready (or ended)."""
        wait = _check_wait(wait)
        headers = {"Idempotency-Key": idempotency_key if idempotency_key is not None else str(uuid.uuid4())}
        if wait is not None:
            headers["Prefer"] = f"wait={wait}"
        result: EphemeralObject = self._client._json(
            "createSandbox", body=fields, headers=headers, timeout=self._client.timeout + (wait or 0)
        )
        return result

    def get(self, id: str, *, wait: Optional[int] = None) -> EphemeralObject:
        """GET /v1/sandboxes/{id}; ``wait`` long-polls until it has ended."""
        wait = _check_wait(wait)
        headers = {"Prefer": f"wait={wait}"} if wait is not None else {}
        result: EphemeralObject = self._client._json(
            "getSandbox", path={"id": id}, headers=headers, timeout=self._client.timeout + (wait or 0)
        )
        return result

    def list(
        self, *, status: Optional[str] = None, metadata: Optional[Mapping[str, str]] = None,
        after: Optional[str] = None, limit: Optional[int] = None,
    ) -> Iterator[EphemeralObject]:
        """Every sandbox, newest first, page after page."""
        cursor = after
        while True:
            page = self._client._json(
                "listSandboxes",
                query={"limit": limit, "after": cursor, "status": status, "metadata": metadata},
            )
            data = page.get("data") or []
            yield from data
            if not page.get("has_more") or not data:
                return
            cursor = data[-1]["id"]

    def delete(self, id: str) -> EphemeralObject:
        """DELETE /v1/sandboxes/{id}: stops it, answers it once settled (or after 5 s); idempotent."""
        result: EphemeralObject = self._client._json(
            "deleteSandbox", path={"id": id}, timeout=self._client.timeout + 5
        )
        return result

    def exec(self, id: str, command: str, *, wait: Optional[int] = None, **fields: Any) -> EphemeralObject:
        """Runs one command (``/bin/sh -c``) and answers it once finished (``status`` exited or
        failed), or still ``running`` when ``wait`` seconds (60 when None) passed first. Fields:
        timeout_seconds, cwd, env, stdin. Never retried: a command is not idempotent."""
        wait = _check_wait(wait)
        headers = {"Prefer": f"wait={wait}"} if wait is not None else {}
        result: EphemeralObject = self._client._json(
            "runSandboxCommand", path={"id": id}, body={"command": command, **fields},
            headers=headers, safe=False, timeout=self._client.timeout + (60 if wait is None else wait),
        )
        return result

    def stream(self, id: str, command: str, **fields: Any) -> Iterator[EphemeralObject]:
        """Runs one command and yields its output as it comes: ``stdout`` / ``stderr`` events
        ``{text, offset}``, then one ``exit`` event holding the finished command."""
        answer = self._client._request(
            "runSandboxCommand", path={"id": id}, body={"command": command, **fields},
            accept="text/event-stream", safe=False, timeout=max(self._client.timeout, 45.0),
        )
        return _command_stream(answer)

    def background(self, id: str, command: str, **fields: Any) -> EphemeralObject:
        """Starts a background command (cwd, env, stdin); answers it at once, ``running``."""
        result: EphemeralObject = self._client._json(
            "runSandboxCommand", path={"id": id},
            body={"command": command, "background": True, **fields}, safe=False,
        )
        return result

    def command(self, id: str, command_id: str) -> EphemeralObject:
        """GET …/commands/{cid}: one of the sandbox's last 64 commands."""
        result: EphemeralObject = self._client._json(
            "getSandboxCommand", path={"id": id, "cid": command_id}
        )
        return result

    def follow(self, id: str, command_id: str) -> Iterator[EphemeralObject]:
        """A background command's output as it comes, then its ``exit`` event."""
        answer = self._client._request(
            "streamSandboxCommand", path={"id": id, "cid": command_id},
            accept="text/event-stream", timeout=max(self._client.timeout, 45.0),
        )
        return _command_stream(answer)

    def kill(self, id: str, command_id: str) -> EphemeralObject:
        """Kills a background command's process group; a foreground one is ConflictError
        (``not_background``)."""
        result: EphemeralObject = self._client._json(
            "killSandboxCommand", path={"id": id, "cid": command_id}, safe=True
        )
        return result

    def upload(self, id: str, path: str, data: Union[bytes, str]) -> EphemeralObject:
        """PUT …/files/{path}: writes the file (mode 0644, parents made). ``path`` is relative
        to the scratch directory, or absolute under /tmp."""
        raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        result: EphemeralObject = self._client._json(
            "writeSandboxFile", path={"id": id, "path": path}, raw=raw, safe=True
        )
        return result

    def download(self, id: str, path: str) -> bytes:
        """GET …/files/{path}: the file's bytes."""
        return self._client._request(
            "readSandboxFile", path={"id": id, "path": path}, accept="application/octet-stream"
        ).read_body()

    def files(self, id: str, path: Optional[str] = None) -> List[EphemeralObject]:
        """GET …/files: the entries of the scratch directory, or of ``path`` in it."""
        page = self._client._json("listSandboxFiles", path={"id": id}, query={"path": path})
        return list(page.get("data") or [])

    def events(self, id: str, *, after: Optional[int] = None, follow: bool = True) -> Iterator[EphemeralObject]:
        """The sandbox's timeline, as ``runs.events`` gives a run's."""
        if not follow:
            page = self._client._json("listSandboxEvents", path={"id": id}, query={"after": after})
            return iter(page.get("data") or [])
        return self._client.runs._follow(
            id, after, "listSandboxEvents",
            lambda: self._client.sandboxes.get(id).get("status") in SANDBOX_ENDED,
        )
