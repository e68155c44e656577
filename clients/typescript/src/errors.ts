// The errors the client throws: EphemeralError (the server answered with an error status) and
// EphemeralConnectionError (no complete answer: refused, reset, timed out, cut short, malformed).

export interface ErrorBody {
  error?: {
    type?: string;
    code?: string;
    message?: string;
    param?: string;
    request_id?: string;
  };
}

/** The server answered with an error status; the fields are its error body's (docs/API.md). */
export class EphemeralError extends Error {
  override name = "EphemeralError";
  /** The HTTP status. */
  readonly status: number;
  /** `invalid_request_error`, `authentication_error`, `not_found_error`, ... */
  readonly type: string | undefined;
  /** The finer reason: `run_not_found`, `invalid_parameter`, ... */
  readonly code: string | undefined;
  /** The field or header at fault, when there is one. */
  readonly param: string | undefined;
  /** The answer's Request-Id: the server's log lines for the request carry it too. */
  readonly requestId: string | undefined;
  /** The answer's headers (lower-case names). */
  readonly headers: Record<string, string>;
  /** The parsed body, when it was JSON. */
  readonly body: unknown;

  constructor(
    status: number,
    message: string,
    fields: {
      type?: string | undefined;
      code?: string | undefined;
      param?: string | undefined;
      requestId?: string | undefined;
      headers?: Record<string, string>;
      body?: unknown;
    } = {},
  ) {
    super(message);
    this.status = status;
    this.type = fields.type;
    this.code = fields.code;
    this.param = fields.param;
    this.requestId = fields.requestId;
    this.headers = fields.headers ?? {};
    this.body = fields.body;
  }
}

/** 400: an invalid body, query parameter or header; `param` names it. */
export class BadRequestError extends EphemeralError {
  override name = "BadRequestError";
}
/** 401: a missing, malformed, unknown or revoked key. */
export class AuthenticationError extends EphemeralError {
  override name = "AuthenticationError";
}
/** 402: the budget is over the available balance, or too small for one model call. */
export class InsufficientBalanceError extends EphemeralError {
  override name = "InsufficientBalanceError";
}
/** 403: an admin endpoint called with a member key. */
export class PermissionDeniedError extends EphemeralError {
  override name = "PermissionDeniedError";
}
/** 404: no such object in the key's organization (or no such path). */
export class NotFoundError extends EphemeralError {
  override name = "NotFoundError";
}
/** 409: the idempotency key's first request is in flight, a name exists, the last admin key. */
export class ConflictError extends EphemeralError {
  override name = "ConflictError";
}
/** 409 sandbox_busy: the sandbox runs a foreground command already. */
export class SandboxBusyError extends ConflictError {
  override name = "SandboxBusyError";
}
/** 409 sandbox_ended: the sandbox has ended; it takes no more calls. */
export class SandboxEndedError extends ConflictError {
  override name = "SandboxEndedError";
}
/** 409 sandbox_elsewhere: another node serves the sandbox (the message names it). */
export class SandboxElsewhereError extends ConflictError {
  override name = "SandboxElsewhereError";
}
/** 409 not_background: only a background command can be killed. */
export class NotBackgroundError extends ConflictError {
  override name = "NotBackgroundError";
}
/** 422: an idempotency key reused with another request, or a run that cannot succeed. */
export class UnprocessableEntityError extends EphemeralError {
  override name = "UnprocessableEntityError";
}
/** 429: too many queued runs for the organization (retried after Retry-After first). */
export class RateLimitError extends EphemeralError {
  override name = "RateLimitError";
}
/** 5xx: the server failed. */
export class InternalServerError extends EphemeralError {
  override name = "InternalServerError";
}
/** 503: shutting down, the store unavailable, a model unavailable (retried first). */
export class ServiceUnavailableError extends InternalServerError {
  override name = "ServiceUnavailableError";
}

type ErrorClass = new (...args: ConstructorParameters<typeof EphemeralError>) => EphemeralError;

const BY_STATUS: Record<number, ErrorClass> = {
  400: BadRequestError,
  401: AuthenticationError,
  402: InsufficientBalanceError,
  403: PermissionDeniedError,
  404: NotFoundError,
  409: ConflictError,
  422: UnprocessableEntityError,
  429: RateLimitError,
  503: ServiceUnavailableError,
};

const BY_CODE: Record<string, ErrorClass> = {
  "409 sandbox_busy": SandboxBusyError,
  "409 sandbox_ended": SandboxEndedError,
  "409 sandbox_elsewhere": SandboxElsewhereError,
  "409 not_background": NotBackgroundError,
};

/** The EphemeralError subclass of an HTTP status (and of its code, for a sandbox's 409s). */
export function errorClass(status: number, code?: string): ErrorClass {
  return (
    BY_CODE[`${status} ${code ?? ""}`] ?? BY_STATUS[status] ?? (status >= 500 ? InternalServerError : EphemeralError)
  );
}

/** The request got no complete answer. */
export class EphemeralConnectionError extends Error {
  override readonly name: string = "EphemeralConnectionError";
  constructor(message: string, options?: { cause?: unknown }) {
    super(message);
    if (options && "cause" in options) {
      (this as { cause?: unknown }).cause = options.cause;
    }
  }
}

/** A request, or a stream's wait for its next bytes, took longer than the client's timeout. */
export class EphemeralTimeoutError extends EphemeralConnectionError {
  override readonly name = "EphemeralTimeoutError";
}

export function errorFromAnswer(
  status: number,
  statusText: string,
  headers: Record<string, string>,
  text: string,
): EphemeralError {
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    body = undefined;
  }
  const err = (body as ErrorBody | undefined)?.error;
  const str = (v: unknown): string | undefined => (typeof v === "string" ? v : undefined);
  const Class = errorClass(status, err && typeof err === "object" ? str(err.code) : undefined);
  if (err && typeof err === "object") {
    return new Class(status, str(err.message) ?? `HTTP ${status} ${statusText}`.trim(), {
      type: str(err.type),
      code: str(err.code),
      param: str(err.param),
      requestId: str(err.request_id) ?? headers["request-id"],
      headers,
      body,
    });
  }
  // Not the API's error shape: a proxy's page, libmicrohttpd's own answers.
  return new Class(status, `HTTP ${status} ${statusText}`.trim(), {
    type: status >= 500 ? "api_error" : undefined,
    requestId: headers["request-id"],
    headers,
    body,
  });
}
