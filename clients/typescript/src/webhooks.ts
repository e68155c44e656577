// Checking a webhook delivery's signature (docs/CLIENTS.md, "Webhook signatures"). A delivery
// carries `Ephemeral-Signature: t=UNIX_SECONDS,v1=HEX`, HEX the HMAC-SHA256, keyed with the
// endpoint's secret, of the timestamp, a full stop and the raw body. On Web Crypto, so it runs in
// Node >= 18 and in browsers alike.

export const SIGNATURE_HEADER = "Ephemeral-Signature";
export const DEFAULT_TOLERANCE_SECONDS = 300;
/** A header longer than this is refused unread: a few signatures fit in far less. */
const MAX_SIGNATURE_HEADER = 4096;

/** The header is missing, malformed, too old or too new, or matches no signature of the body. */
export class SignatureVerificationError extends Error {
  override name = "SignatureVerificationError";
}

async function subtleCrypto(): Promise<SubtleCrypto> {
  const global = (globalThis as { crypto?: Crypto }).crypto;
  if (global?.subtle) return global.subtle;
  // Node 18 has Web Crypto as node:crypto's webcrypto, not yet as a global. The name is a
  // variable so that a bundler for the browser leaves it alone.
  const name = "node:crypto";
  const mod = (await import(name)) as { webcrypto?: Crypto };
  if (mod.webcrypto?.subtle) return mod.webcrypto.subtle;
  throw new Error("no Web Crypto here: Node >= 18 or a browser");
}

function bytesOf(value: string | Uint8Array | ArrayBuffer, what: string): Uint8Array<ArrayBuffer> {
  if (typeof value === "string") return new TextEncoder().encode(value) as Uint8Array<ArrayBuffer>;
  if (value instanceof Uint8Array || value instanceof ArrayBuffer) {
    const view = value instanceof ArrayBuffer ? new Uint8Array(value) : value;
    const copy = new Uint8Array(view.byteLength);
    copy.set(view);
    return copy;
  }
  throw new TypeError(`${what} must be a string, a Uint8Array or an ArrayBuffer`);
}

function hexBytes(hex: string): Uint8Array<ArrayBuffer> | undefined {
  if (!/^[0-9a-fA-F]{64}$/.test(hex)) return undefined;
  const out = new Uint8Array(32);
  for (let i = 0; i < 32; i++) out[i] = parseInt(hex.slice(2 * i, 2 * i + 2), 16);
  return out;
}

/**
 * Resolves when `header` (the Ephemeral-Signature value) signs `body` (the raw request body, as
 * read, before any parsing) with `secret`, at a time within `toleranceSeconds` (default 300) of
 * `now` (Unix seconds; default the clock), either side; rejects with SignatureVerificationError
 * otherwise. Several `v1=` entries may be given (a secret being rotated): one match is enough.
 * Web Crypto's HMAC verify compares in constant time.
 */
export async function verifySignature(
  body: string | Uint8Array | ArrayBuffer,
  header: string | null | undefined,
  secret: string | Uint8Array,
  options: { toleranceSeconds?: number; now?: number } = {},
): Promise<void> {
  const tolerance = options.toleranceSeconds ?? DEFAULT_TOLERANCE_SECONDS;
  if (!Number.isInteger(tolerance) || tolerance < 0) {
    throw new RangeError("toleranceSeconds must be a non-negative integer");
  }
  const key = bytesOf(secret, "secret");
  if (key.byteLength === 0) throw new RangeError("secret must not be empty");
  const payload = bytesOf(body, "body");
  if (typeof header !== "string" || header === "") {
    throw new SignatureVerificationError(`no ${SIGNATURE_HEADER} header`);
  }
  if (header.length > MAX_SIGNATURE_HEADER) {
    throw new SignatureVerificationError(`the ${SIGNATURE_HEADER} header is too long`);
  }
  let timestamp: string | undefined;
  const signatures: string[] = [];
  for (const item of header.split(",")) {
    const part = item.trim();
    const eq = part.indexOf("=");
    if (eq < 0) throw new SignatureVerificationError(`the ${SIGNATURE_HEADER} header is malformed`);
    const name = part.slice(0, eq);
    const value = part.slice(eq + 1);
    if (name === "t") {
      if (timestamp !== undefined) throw new SignatureVerificationError(`the ${SIGNATURE_HEADER} header has two t=`);
      timestamp = value;
    } else if (name === "v1") {
      signatures.push(value);
    }
    // Other schemes (a later v2=) are skipped: the header may carry them side by side.
  }
  if (timestamp === undefined || !/^[0-9]{1,12}$/.test(timestamp)) {
    throw new SignatureVerificationError(`the ${SIGNATURE_HEADER} header has no valid t=`);
  }
  if (signatures.length === 0) {
    throw new SignatureVerificationError(`the ${SIGNATURE_HEADER} header has no v1= signature`);
  }
  const now = options.now ?? Date.now() / 1000;
  if (Math.abs(now - Number(timestamp)) > tolerance) {
    throw new SignatureVerificationError(
      `the signature's time is more than ${tolerance} s from now (a replay, or a clock off)`,
    );
  }
  const subtle = await subtleCrypto();
  const hmac = await subtle.importKey("raw", key, { name: "HMAC", hash: "SHA-256" }, false, ["verify"]);
  const prefix = new TextEncoder().encode(`${timestamp}.`);
  const signed = new Uint8Array(prefix.byteLength + payload.byteLength);
  signed.set(prefix);
  signed.set(payload, prefix.byteLength);
  let matched = false;
  for (const candidate of signatures) {
    const sig = hexBytes(candidate);
    // Every candidate is verified: no early exit for a timer to see.
    if (sig && (await subtle.verify("HMAC", hmac, sig, signed))) matched = true;
  }
  if (!matched) throw new SignatureVerificationError("no signature of the body with this secret");
}
