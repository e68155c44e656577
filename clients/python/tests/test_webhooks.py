"""ephemeral.verify_signature: a delivery's Ephemeral-Signature checked over the raw body. The
expected signatures are computed here with hmac directly, as a receiver in any language would.
Runs without a server."""

import hashlib
import hmac
import unittest

import ephemeral
from ephemeral import SignatureVerificationError, verify_signature

SECRET = "whsec_0123456789abcdef0123456789abcdef"
BODY = b'{"id":"evt_1","object":"event","type":"run.completed","created_at":1700000000,"data":{}}'
T = 1_700_000_000


def sign(body: bytes, t: int = T, secret: str = SECRET) -> str:
    return hmac.new(secret.encode(), str(t).encode() + b"." + body, hashlib.sha256).hexdigest()


class TestVerifySignature(unittest.TestCase):
    def test_a_good_signature_passes(self) -> None:
        header = f"t={T},v1={sign(BODY)}"
        verify_signature(BODY, header, SECRET, now=T)
        verify_signature(BODY.decode(), header, SECRET.encode(), now=T + 299)
        # Spaces after the commas, upper-case hex, an unknown scheme beside it: still one match.
        loose = f"t={T}, v2=abcd, v1={sign(BODY).upper()}"
        verify_signature(BODY, loose, SECRET, now=T)
        self.assertEqual(ephemeral.SIGNATURE_HEADER, "Ephemeral-Signature")

    def test_one_of_several_signatures(self) -> None:
        # During a secret's rotation the header carries one v1= per secret.
        header = f"t={T},v1={sign(BODY, secret='old')},v1={sign(BODY)}"
        verify_signature(BODY, header, SECRET, now=T)
        with self.assertRaises(SignatureVerificationError):
            verify_signature(BODY, header, "another", now=T)

    def test_a_changed_body_fails(self) -> None:
        header = f"t={T},v1={sign(BODY)}"
        for body in (BODY + b" ", BODY.replace(b"completed", b"failed"), b""):
            with self.assertRaises(SignatureVerificationError, msg=body):
                verify_signature(body, header, SECRET, now=T)

    def test_the_wrong_secret_fails(self) -> None:
        with self.assertRaises(SignatureVerificationError):
            verify_signature(BODY, f"t={T},v1={sign(BODY)}", SECRET + "x", now=T)

    def test_the_timestamp_is_signed(self) -> None:
        # The signature of T presented with another t= (to pass the window) fails.
        with self.assertRaises(SignatureVerificationError):
            verify_signature(BODY, f"t={T + 1000},v1={sign(BODY)}", SECRET, now=T + 1000)

    def test_outside_the_tolerance_fails(self) -> None:
        header = f"t={T},v1={sign(BODY)}"
        verify_signature(BODY, header, SECRET, now=T + 300)
        verify_signature(BODY, header, SECRET, now=T - 300)
        for now in (T + 301, T - 301, T + 86400):
            with self.assertRaises(SignatureVerificationError, msg=now) as ctx:
                verify_signature(BODY, header, SECRET, now=now)
            self.assertIn("300 s", str(ctx.exception))
        verify_signature(BODY, header, SECRET, now=T + 3000, tolerance=3600)
        with self.assertRaises(SignatureVerificationError):
            verify_signature(BODY, header, SECRET, now=T + 1, tolerance=0)
        # The clock itself is the default: a signature from 2023 is stale now.
        with self.assertRaises(SignatureVerificationError):
            verify_signature(BODY, header, SECRET)

    def test_malformed_headers_fail_cleanly(self) -> None:
        good = sign(BODY)
        for header in (
            None, "", "garbage", f"v1={good}", f"t={T}", f"t=,v1={good}", f"t=-5,v1={good}",
            f"t=1e9,v1={good}", f"t={T},t={T},v1={good}", f"t={T},v1=", f"t={T},v1=zz{good[2:]}",
            f"t={T},v1={good[:-1]}", f"t={T},v1={good}0", f"t={T},v1=é{good[1:]}",
            f"t=１７,v1={good}", "t=" + "9" * 40 + f",v1={good}", f"t={T},,v1={good}",
            f"t={T},v1={good}," + "x" * 5000,
        ):
            with self.assertRaises(SignatureVerificationError, msg=repr(header)):
                verify_signature(BODY, header, SECRET, now=T)  # type: ignore[arg-type]

    def test_bad_arguments(self) -> None:
        header = f"t={T},v1={sign(BODY)}"
        with self.assertRaises(ValueError):
            verify_signature(BODY, header, "", now=T)
        with self.assertRaises(ValueError):
            verify_signature(BODY, header, SECRET, tolerance=-1, now=T)
        with self.assertRaises(TypeError):
            verify_signature(None, header, SECRET, now=T)  # type: ignore[arg-type]
        self.assertTrue(issubclass(SignatureVerificationError, ephemeral.EphemeralError))


if __name__ == "__main__":
    unittest.main()
