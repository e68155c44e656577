#!/usr/bin/env python3
"""The seed example (examples/sandbox-proof/request.json) with the Python client: create the run,
follow its timeline to the end, print the result and the money.

    EPHEMERAL_URL=http://127.0.0.1:8080 EPHEMERAL_API_KEY=eph_... python3 seed.py request.json
"""

import json
import sys

import ephemeral


def main() -> int:
    with open(sys.argv[1] if len(sys.argv) > 1 else "request.json", encoding="utf-8") as f:
        request = json.load(f)
    client = ephemeral.Client()
    try:
        run = client.runs.create(**request)
        print(f"{run.id} · {run.model}")
        for event in client.runs.events(run.id):
            print(f"{event.t:7.2f}  {event.type:18} {event.message}")
        run = client.runs.get(run.id)
    except ephemeral.APIError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"\n{run.status}\n\n{run.result}\n")
    cost = run.cost
    print(f"charged {cost.charged_micros} + released {cost.released_micros} = reserved {cost.reserved_micros} micros")
    return 0 if run.status == "completed" else 1


if __name__ == "__main__":
    sys.exit(main())
