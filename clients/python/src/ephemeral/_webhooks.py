"""Checking a webhook delivery's signature (docs/CLIENTS.md, "Webhook signatures").

A delivery carries ``Ephemeral-Signature: t=UNIX_SECONDS,v1=HEX`` where HEX is the lower-case
hexadecimal HMAC-SHA256, keyed with the endpoint's secret, of the timestamp, a full stop and the
raw body. A receiver checks it over the bytes it read, before it parses them.
"""

import hashlib
import hmac
import time
from typing import List, Optional, Union

from ._errors import EphemeralError

SIGNATURE_HEADER = "Ephemeral-Signature"
DEFAULT_TOLERANCE = 300
# A header longer than this is refused unread: a few signatures fit in far less.
MAX_SIGNATURE_HEADER = 4096


class SignatureVerificationError(EphemeralError):
    """The signature header is missing, malformed, too old or too new, or matches no signature
    of the body with the secret."""


def _as_bytes(value: Union[str, bytes], what: str) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    raise TypeError(f"{what} must be bytes or str")


def verify_signature(
    body: Union[bytes, str],
    header: Optional[str],
    secret: Union[str, bytes],
    *,
    tolerance: int = DEFAULT_TOLERANCE,
    now: Optional[float] = None,
) -> None:
    """Raises SignatureVerificationError unless ``header`` (the Ephemeral-Signature value) signs
    ``body`` (the raw request body) with ``secret``, at a time within ``tolerance`` seconds of
    ``now`` (default: the clock), either side. Several ``v1=`` entries may be given (a secret
    being rotated): one match is enough. The comparison takes the same time whatever it finds."""
    if isinstance(tolerance, bool) or not isinstance(tolerance, int) or tolerance < 0:
        raise ValueError("tolerance must be a non-negative integer (seconds)")
    key = _as_bytes(secret, "secret")
    if not key:
        raise ValueError("secret must not be empty")
    payload = _as_bytes(body, "body")
    if not isinstance(header, str) or not header:
        raise SignatureVerificationError(f"no {SIGNATURE_HEADER} header")
    if len(header) > MAX_SIGNATURE_HEADER:
        raise SignatureVerificationError(f"the {SIGNATURE_HEADER} header is too long")
    timestamp: Optional[str] = None
    signatures: List[str] = []
    for item in header.split(","):
        name, sep, value = item.strip().partition("=")
        if not sep:
            raise SignatureVerificationError(f"the {SIGNATURE_HEADER} header is malformed")
        if name == "t":
            if timestamp is not None:
                raise SignatureVerificationError(f"the {SIGNATURE_HEADER} header has two t=")
            timestamp = value
        elif name == "v1":
            signatures.append(value.lower())
        # Other schemes (a later v2=) are skipped: the header may carry them side by side.
    if timestamp is None or not timestamp.isdigit() or len(timestamp) > 12 or not timestamp.isascii():
        raise SignatureVerificationError(f"the {SIGNATURE_HEADER} header has no valid t=")
    if not signatures:
        raise SignatureVerificationError(f"the {SIGNATURE_HEADER} header has no v1= signature")
    clock = time.time() if now is None else now
    if abs(clock - int(timestamp)) > tolerance:
        raise SignatureVerificationError(
            f"the signature's time is more than {tolerance} s from now (a replay, or a clock off)"
        )
    expected = hmac.new(key, timestamp.encode("ascii") + b"." + payload, hashlib.sha256).hexdigest()
    matched = False
    for candidate in signatures:
        # compare_digest on ASCII text, every candidate compared: no early exit to time.
        if hmac.compare_digest(expected, candidate if candidate.isascii() else ""):
            matched = True
    if not matched:
        raise SignatureVerificationError("no signature of the body with this secret")
