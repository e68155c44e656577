// A stand-in HTTP server on loopback for the tests: each request goes to a function the test
// gives, which answers itself, proxies to the real server, or cuts the connection.
import assert from "node:assert/strict";
import http from "node:http";

// Awaits the promise, which must reject: check(err) then asserts what it rejected with.
export async function rejects(promise, check) {
  try {
    await promise;
  } catch (err) {
    check(err);
    return;
  }
  assert.fail("no error");
}

export async function standIn(answer) {
  const requests = [];
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      const r = {
        method: req.method,
        path: req.url,
        route: new URL(req.url, "http://x").pathname,
        headers: req.headers,
        body: Buffer.concat(chunks),
      };
      requests.push(r);
      answer(r, res, requests.length);
    });
  });
  server.keepAliveTimeout = 1;
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address();
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    async close() {
      server.closeAllConnections?.();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

export function reply(res, status, body = "{}", headers = {}, type = "application/json") {
  res.writeHead(status, { "Content-Type": type, "Content-Length": Buffer.byteLength(body), Connection: "close", ...headers });
  res.end(body);
}

// Sends the request on to the real server and streams its answer back; with cutAfter, the
// connection is destroyed in the middle of the answer as soon as cutAfter(sentSoFar) says so.
export function proxy(r, res, upstream, cutAfter) {
  const u = new URL(upstream);
  const headers = { ...r.headers };
  delete headers.host;
  delete headers.connection;
  const up = http.request(
    { host: u.hostname, port: u.port, method: r.method, path: r.path, headers },
    (ur) => {
      const h = { ...ur.headers };
      delete h["transfer-encoding"];
      delete h["content-length"];
      delete h.connection;
      res.writeHead(ur.statusCode, h);
      let sent = "";
      let buffered = "";
      ur.setEncoding("utf8");
      ur.on("data", (chunk) => {
        if (!cutAfter) return void res.write(chunk);
        buffered += chunk;
        let nl;
        while ((nl = buffered.indexOf("\n")) >= 0) {
          const line = buffered.slice(0, nl + 1);
          buffered = buffered.slice(nl + 1);
          res.write(line);
          sent += line;
          if (cutAfter(sent)) {
            ur.destroy();
            // The bytes written reach the client, then the connection is cut without the end.
            res.socket.end(() => res.socket.destroy());
            return;
          }
        }
      });
      ur.on("end", () => {
        if (buffered) res.write(buffered);
        res.end();
      });
    },
  );
  up.on("error", () => res.destroy());
  if (r.body.length) up.write(r.body);
  up.end();
}

// operationId -> [METHOD, path] from the document's `paths:` (a path two spaces in, a method
// four, its operationId six), without a YAML library.
export function documentOperations(text) {
  const methods = new Set(["get", "put", "post", "delete", "patch", "head", "options", "trace"]);
  const ops = {};
  let inPaths = false;
  let path = null;
  let method = null;
  for (const line of text.split("\n")) {
    if (/^\S/.test(line)) {
      inPaths = line.startsWith("paths:");
      continue;
    }
    if (!inPaths) continue;
    let m = line.match(/^  (\/\S*):\s*$/);
    if (m) {
      path = m[1];
      method = null;
      continue;
    }
    m = line.match(/^    (\w+):/);
    if (m) {
      method = methods.has(m[1]) ? m[1] : null;
      continue;
    }
    m = line.match(/^      operationId:\s*(\S+)\s*$/);
    if (m && path && method) {
      if (m[1] in ops) throw new Error(`operationId ${m[1]} twice in the document`);
      ops[m[1]] = [method.toUpperCase(), path];
    }
  }
  return ops;
}
