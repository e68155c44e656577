#!/usr/bin/env python3
"""Drive a sandbox with the Python client (clients/python): create it, upload a CSV, run a
command that reads it while its output streams, download what the command wrote, delete it.

    PYTHONPATH=clients/python/src EPHEMERAL_URL=http://127.0.0.1:8080 EPHEMERAL_API_KEY=eph_... \
        python3 examples/drive-a-sandbox/drive.py [OUT_FILE]
"""

import sys

import ephemeral

CSV = b"city,people\nLyon,522000\nNantes,320000\nLille,236000\n"
# Sums the second column, writing each row as it goes and the total to total.txt.
COMMAND = (
    "tail -n +2 data/cities.csv | while IFS=, read -r city n; do echo \"$city $n\"; "
    "t=$((${t:-0} + n)); echo $t > total.txt; done; echo total $(cat total.txt)"
)


def main() -> int:
    out_path = sys.argv[1] if len(sys.argv) > 1 else "total.txt"
    client = ephemeral.Client()  # EPHEMERAL_URL and EPHEMERAL_API_KEY
    box = client.sandboxes.create(max_cost_micros=200_000, timeout_seconds=120, wait=120)
    print(f"{box.id} {box.status}")
    try:
        if box.status != "ready":
            print(f"error: the sandbox is {box.status}: {box.error}", file=sys.stderr)
            return 1
        written = client.sandboxes.upload(box.id, "data/cities.csv", CSV)
        print(f"uploaded {written.path} ({written.size} bytes)")
        exit_event = None
        for event in client.sandboxes.stream(box.id, COMMAND):
            if event.type in ("stdout", "stderr"):  # a chunk as the command wrote it
                print(event.text, end="", file=sys.stdout if event.type == "stdout" else sys.stderr,
                      flush=True)
            else:
                exit_event = event
        if exit_event is None or exit_event.exit_code != 0:
            print(f"error: the command failed: {exit_event}", file=sys.stderr)
            return 1
        print(f"exit {exit_event.exit_code} in {exit_event.duration_ms} ms")
        data = client.sandboxes.download(box.id, "total.txt")
        with open(out_path, "wb") as f:
            f.write(data)
        print(f"downloaded total.txt: {data.decode().strip()}")
    except ephemeral.APIError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    finally:
        ended = client.sandboxes.delete(box.id)
        cost = ended.cost
        print(f"{ended.status}: charged {cost.charged_micros} + released {cost.released_micros} "
              f"= reserved {cost.reserved_micros} micros")
    return 0


if __name__ == "__main__":
    sys.exit(main())
