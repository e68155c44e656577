"""The client's parsers of what a server sends, without a server: Retry-After, Server-Sent
Events, error bodies."""

import time
import unittest
from email.utils import formatdate

import ephemeral
from ephemeral._client import _api_error, _retry_after, _sse_messages


class TestRetryAfter(unittest.TestCase):
    def test_seconds_and_dates(self) -> None:
        self.assertEqual(_retry_after({"retry-after": "7"}), 7.0)
        self.assertEqual(_retry_after({"retry-after": " 0 "}), 0.0)
        self.assertIsNone(_retry_after({}))
        later = _retry_after({"retry-after": formatdate(time.time() + 120, usegmt=True)})
        assert later is not None
        self.assertTrue(100 <= later <= 120, later)
        self.assertEqual(_retry_after({"retry-after": formatdate(time.time() - 600, usegmt=True)}), 0.0)
        for bad in ("soon", "-3", "1.5", "", "Mon, 99 Foo 2026 99:99:99 GMT"):
            self.assertIsNone(_retry_after({"retry-after": bad}), bad)


class TestSse(unittest.TestCase):
    def messages(self, text: bytes):  # type: ignore[no-untyped-def]
        return list(_sse_messages(iter(text.split(b"\n"))))

    def test_fields_comments_and_multi_line_data(self) -> None:
        got = self.messages(b": keep-alive\n\nid: 1\nevent: a\ndata: {\"x\":\ndata: 1}\n\nid: 2\ndata:{}\n\n")
        self.assertEqual(got, [("a", "1", '{"x":\n1}'), ("", "2", "{}")])

    def test_a_message_cut_short_is_not_given(self) -> None:
        self.assertEqual(self.messages(b"id: 1\ndata: {}\n\nid: 2\nevent: b\ndata: {"), [("", "1", "{}")])

    def test_an_id_with_nul_is_ignored(self) -> None:
        self.assertEqual(self.messages(b"id: 1\x002\ndata: {}\n\n"), [("", None, "{}")])


class TestErrorBodies(unittest.TestCase):
    def test_the_api_shape(self) -> None:
        err = _api_error(404, {"request-id": "req_h"}, b'{"error":{"type":"not_found_error","code":"run_not_found",'
                         b'"message":"no run","param":null,"request_id":"req_b"}}', "Not Found")
        self.assertIsInstance(err, ephemeral.NotFoundError)
        self.assertEqual((err.type, err.code, err.param, err.request_id, err.message),
                         ("not_found_error", "run_not_found", None, "req_b", "no run"))

    def test_not_the_api_shape(self) -> None:
        for body in (b"<html>bad gateway</html>", b"", b"[1,2]", b'{"error":"text"}', b"\xff\xfe"):
            err = _api_error(502, {"request-id": "req_h"}, body, "Bad Gateway")
            self.assertIsInstance(err, ephemeral.InternalServerError, body)
            self.assertEqual(err.status, 502)
            self.assertEqual(err.request_id, "req_h")
            self.assertIn("502", str(err))
        self.assertIs(type(_api_error(418, {}, b"", "")), ephemeral.APIError)
        self.assertIs(type(_api_error(503, {}, b"", "")), ephemeral.ServiceUnavailableError)


if __name__ == "__main__":
    unittest.main()


class TestBadArguments(unittest.TestCase):
    """Refused before anything is sent: the stand-in's base URL is never reached."""

    def test_client(self) -> None:
        for url in ("ftp://h", "http://", "localhost:8080", "http://u:p@h", "http://h/?q=1", "http://h/#f"):
            with self.assertRaises(ValueError, msg=url):
                ephemeral.Client(url, "eph_k")
        for key in ("", "eph k", "eph_\n", "eph_é"):
            with self.assertRaises(ValueError, msg=repr(key)):
                ephemeral.Client("http://127.0.0.1:1", key)
        for kwargs in ({"timeout": 0}, {"timeout": -1}, {"max_retries": -1}):
            with self.assertRaises(ValueError, msg=kwargs):
                ephemeral.Client("http://127.0.0.1:1", "eph_k", **kwargs)  # type: ignore[arg-type]
        self.assertNotIn("eph_secret", repr(ephemeral.Client("http://127.0.0.1:1", "eph_secret")))

    def test_calls(self) -> None:
        c = ephemeral.Client("http://127.0.0.1:1", "eph_k", max_retries=0)
        rid = "run_" + "0" * 32
        for wait in (-1, 601, 1.5, True, "10"):
            with self.assertRaises(ValueError, msg=wait):
                c.runs.get(rid, wait=wait)  # type: ignore[arg-type]
            with self.assertRaises(ValueError, msg=wait):
                c.runs.create(prompt="p", max_cost_micros=1, wait=wait)  # type: ignore[arg-type]
        for micros in (0, -5, 1.5, True):
            with self.assertRaises(ValueError, msg=micros):
                c.credits.add(micros)  # type: ignore[arg-type]
        with self.assertRaises(ValueError):
            c.runs.get("")
        with self.assertRaises(ValueError):
            next(c.runs.list(metadata={"k": 1}))  # type: ignore[dict-item]
