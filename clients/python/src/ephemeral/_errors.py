"""The errors the client raises: APIError (the server answered with an error) and its subclasses
by status, and APIConnectionError (no answer at all: refused, reset, timed out, cut short)."""

from typing import Any, Dict, Mapping, Optional, Tuple, Type


class EphemeralError(Exception):
    """The base of every error this package raises."""


class APIConnectionError(EphemeralError):
    """The request got no complete answer: the connection failed, was reset or timed out, or
    the answer was malformed or over the size limit."""


class APITimeoutError(APIConnectionError):
    """A connect or a read took longer than the client's timeout."""


class APIError(EphemeralError):
    """The server answered with an error status.

    Its fields are the error body's (docs/API.md, "Errors"): ``type``, ``code``, ``param`` (the
    field or header at fault, or None), ``request_id`` (the answer's Request-Id, which the
    server's log lines carry too) and ``message``; ``status`` is the HTTP status and ``body`` the
    parsed error body (None when it was not JSON).
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: Optional[str] = None,
        code: Optional[str] = None,
        param: Optional[str] = None,
        request_id: Optional[str] = None,
        headers: Optional[Mapping[str, str]] = None,
        body: Optional[Dict[str, Any]] = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.code = code
        self.param = param
        self.request_id = request_id
        self.headers: Dict[str, str] = dict(headers or {})
        self.body = body

    def __str__(self) -> str:
        parts = [f"{self.status}"]
        if self.type:
            parts.append(self.type)
        if self.code:
            parts.append(f"({self.code})")
        text = " ".join(parts) + f": {self.message}"
        if self.param:
            text += f" [param {self.param}]"
        if self.request_id:
            text += f" [request {self.request_id}]"
        return text

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(status={self.status!r}, type={self.type!r}, "
            f"code={self.code!r}, param={self.param!r}, request_id={self.request_id!r}, "
            f"message={self.message!r})"
        )


class BadRequestError(APIError):
    """400: an invalid body, query parameter or header; ``param`` names it."""


class AuthenticationError(APIError):
    """401: a missing, malformed, unknown or revoked key."""


class InsufficientBalanceError(APIError):
    """402: the budget is over the available balance, or too small for one model call."""


class PermissionDeniedError(APIError):
    """403: an admin endpoint called with a member key."""


class NotFoundError(APIError):
    """404: no such object in the key's organization (or no such path)."""


class ConflictError(APIError):
    """409: the idempotency key's first request is in flight, a name exists, the last admin key."""


class SandboxBusyError(ConflictError):
    """409 sandbox_busy: the sandbox runs a foreground command already."""


class SandboxEndedError(ConflictError):
    """409 sandbox_ended: the sandbox has ended; it takes no more calls."""


class SandboxElsewhereError(ConflictError):
    """409 sandbox_elsewhere: another node serves the sandbox (the message names it)."""


class NotBackgroundError(ConflictError):
    """409 not_background: only a background command can be killed."""


class UnprocessableEntityError(APIError):
    """422: an idempotency key reused with another request, or a run that cannot succeed."""


class RateLimitError(APIError):
    """429: too many queued runs for the organization (retried after Retry-After first)."""


class InternalServerError(APIError):
    """5xx: the server failed, or (503) is shutting down or could not queue the run."""


class ServiceUnavailableError(InternalServerError):
    """503: shutting down, the store unavailable, a model unavailable (retried first)."""


_BY_STATUS: Dict[int, Type[APIError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    402: InsufficientBalanceError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    422: UnprocessableEntityError,
    429: RateLimitError,
    503: ServiceUnavailableError,
}


_BY_CODE: Dict[Tuple[int, str], Type[APIError]] = {
    (409, "sandbox_busy"): SandboxBusyError,
    (409, "sandbox_ended"): SandboxEndedError,
    (409, "sandbox_elsewhere"): SandboxElsewhereError,
    (409, "not_background"): NotBackgroundError,
}


def error_class(status: int, code: Optional[str] = None) -> Type[APIError]:
    """The APIError subclass of an HTTP status (and of its error code, for a sandbox's 409s)."""
    cls = _BY_CODE.get((status, code or "")) or _BY_STATUS.get(status)
    if cls is not None:
        return cls
    if status >= 500:
        return InternalServerError
    return APIError
