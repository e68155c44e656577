#!/usr/bin/env node
// The seed example (examples/sandbox-proof/request.json) with the TypeScript client: create the
// run, follow its timeline to the end, print the result and the money.
//
//     EPHEMERAL_URL=http://127.0.0.1:8080 EPHEMERAL_API_KEY=eph_... node seed.mjs request.json
import { readFileSync } from "node:fs";
import { Ephemeral, EphemeralError } from "ephemeral";

const request = JSON.parse(readFileSync(process.argv[2] ?? "request.json", "utf8"));
const client = new Ephemeral();
let run;
try {
  run = await client.runs.create(request);
  console.log(`${run.id} · ${run.model}`);
  for await (const event of client.runs.events(run.id)) {
    if (event.type !== "result") console.log(`${event.t.toFixed(2).padStart(7)}  ${event.type.padEnd(18)} ${event.message}`);
  }
  run = await client.runs.get(run.id);
} catch (err) {
  if (!(err instanceof EphemeralError)) throw err;
  console.error(`error: ${err.status} ${err.type}: ${err.message}`);
  process.exit(1);
}
console.log(`\n${run.status}\n\n${run.result}\n`);
const cost = run.cost;
console.log(`charged ${cost.charged_micros} + released ${cost.released_micros} = reserved ${cost.reserved_micros} micros`);
process.exit(run.status === "completed" ? 0 : 1);
