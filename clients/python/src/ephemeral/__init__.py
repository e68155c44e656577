"""A client for the Ephemeral API: AI agent runs in disposable sandboxes, under a hard budget.

    import ephemeral
    client = ephemeral.Client()          # EPHEMERAL_URL, EPHEMERAL_API_KEY
    run = client.runs.create(prompt="...", max_cost_micros=40000, wait=120)
"""

from ._client import (
    DEFAULT_BASE_URL,
    FINAL_EVENT,
    TERMINAL_STATUSES,
    Client,
    Connections,
    Credits,
    Keys,
    Models,
    Runs,
    Sandboxes,
    __version__,
)
from ._errors import (
    APIConnectionError,
    APIError,
    APITimeoutError,
    AuthenticationError,
    BadRequestError,
    ConflictError,
    EphemeralError,
    InsufficientBalanceError,
    InternalServerError,
    NotBackgroundError,
    NotFoundError,
    PermissionDeniedError,
    RateLimitError,
    SandboxBusyError,
    SandboxElsewhereError,
    SandboxEndedError,
    ServiceUnavailableError,
    UnprocessableEntityError,
)
from ._object import EphemeralObject
from ._operations import OPERATIONS
from ._webhooks import (
    DEFAULT_TOLERANCE,
    SIGNATURE_HEADER,
    SignatureVerificationError,
    verify_signature,
)

# The transport error under a second name, ConnectionError (not in __all__: it would shadow the
# built-in ConnectionError on a star import).
ConnectionError = APIConnectionError

__all__ = [
    "APIConnectionError",
    "APIError",
    "APITimeoutError",
    "AuthenticationError",
    "BadRequestError",
    "Client",
    "ConflictError",
    "Connections",
    "Credits",
    "DEFAULT_BASE_URL",
    "DEFAULT_TOLERANCE",
    "EphemeralError",
    "EphemeralObject",
    "FINAL_EVENT",
    "InsufficientBalanceError",
    "InternalServerError",
    "Keys",
    "Models",
    "NotBackgroundError",
    "NotFoundError",
    "OPERATIONS",
    "PermissionDeniedError",
    "RateLimitError",
    "Runs",
    "SIGNATURE_HEADER",
    "SandboxBusyError",
    "SandboxElsewhereError",
    "SandboxEndedError",
    "Sandboxes",
    "ServiceUnavailableError",
    "SignatureVerificationError",
    "TERMINAL_STATUSES",
    "UnprocessableEntityError",
    "__version__",
    "verify_signature",
]
