// verifySignature: a delivery's Ephemeral-Signature checked over the raw body. The expected
// signatures are computed here with node:crypto's createHmac, as a receiver would. No server.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createHmac } from "node:crypto";
import { SIGNATURE_HEADER, SignatureVerificationError, verifySignature } from "../dist/index.js";

const SECRET = "whsec_0123456789abcdef0123456789abcdef";
const BODY = '{"id":"evt_1","object":"event","type":"run.completed","created_at":1700000000,"data":{}}';
const T = 1_700_000_000;
const sign = (body, t = T, secret = SECRET) => createHmac("sha256", secret).update(`${t}.`).update(body).digest("hex");
const fails = async (promise, msg) => {
  await assert.rejects(promise, (err) => err instanceof SignatureVerificationError, msg);
};

test("a good signature passes", async () => {
  const header = `t=${T},v1=${sign(BODY)}`;
  await verifySignature(BODY, header, SECRET, { now: T });
  await verifySignature(new TextEncoder().encode(BODY), header, new TextEncoder().encode(SECRET), { now: T + 299 });
  await verifySignature(new TextEncoder().encode(BODY).buffer, header, SECRET, { now: T - 299 });
  // Spaces after the commas, upper-case hex, an unknown scheme beside it: still one match.
  await verifySignature(BODY, `t=${T}, v2=abcd, v1=${sign(BODY).toUpperCase()}`, SECRET, { now: T });
  assert.equal(SIGNATURE_HEADER, "Ephemeral-Signature");
});

test("one of several signatures (a secret being rotated)", async () => {
  const header = `t=${T},v1=${sign(BODY, T, "old")},v1=${sign(BODY)}`;
  await verifySignature(BODY, header, SECRET, { now: T });
  await fails(verifySignature(BODY, header, "another", { now: T }));
});

test("a changed body, the wrong secret, a moved timestamp fail", async () => {
  const header = `t=${T},v1=${sign(BODY)}`;
  for (const body of [BODY + " ", BODY.replace("completed", "failed"), ""]) {
    await fails(verifySignature(body, header, SECRET, { now: T }), body);
  }
  await fails(verifySignature(BODY, header, SECRET + "x", { now: T }));
  await fails(verifySignature(BODY, `t=${T + 1000},v1=${sign(BODY)}`, SECRET, { now: T + 1000 }));
});

test("outside the tolerance fails", async () => {
  const header = `t=${T},v1=${sign(BODY)}`;
  await verifySignature(BODY, header, SECRET, { now: T + 300 });
  await verifySignature(BODY, header, SECRET, { now: T - 300 });
  for (const now of [T + 301, T - 301, T + 86400]) {
    await assert.rejects(verifySignature(BODY, header, SECRET, { now }), /300 s/);
  }
  await verifySignature(BODY, header, SECRET, { now: T + 3000, toleranceSeconds: 3600 });
  await fails(verifySignature(BODY, header, SECRET, { now: T + 1, toleranceSeconds: 0 }));
  await fails(verifySignature(BODY, header, SECRET)); // the clock: 2023 is stale
});

test("malformed headers fail cleanly", async () => {
  const good = sign(BODY);
  const headers = [
    undefined, null, "", "garbage", `v1=${good}`, `t=${T}`, `t=,v1=${good}`, `t=-5,v1=${good}`,
    `t=1e9,v1=${good}`, `t=${T},t=${T},v1=${good}`, `t=${T},v1=`, `t=${T},v1=zz${good.slice(2)}`,
    `t=${T},v1=${good.slice(0, -1)}`, `t=${T},v1=${good}0`, `t=${T},v1=é${good.slice(1)}`,
    `t=１７,v1=${good}`, "t=" + "9".repeat(40) + `,v1=${good}`, `t=${T},,v1=${good}`,
    `t=${T},v1=${good},` + "x".repeat(5000),
  ];
  for (const header of headers) await fails(verifySignature(BODY, header, SECRET, { now: T }), String(header));
});

test("bad arguments", async () => {
  const header = `t=${T},v1=${sign(BODY)}`;
  await assert.rejects(verifySignature(BODY, header, "", { now: T }), RangeError);
  await assert.rejects(verifySignature(BODY, header, SECRET, { now: T, toleranceSeconds: -1 }), RangeError);
  await assert.rejects(verifySignature(null, header, SECRET, { now: T }), TypeError);
});
