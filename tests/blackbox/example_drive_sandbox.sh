#!/bin/bash
# The drive-a-sandbox example (examples/drive-a-sandbox) against a real server: the sandbox is
# created, the CSV uploaded, the command's output streamed row by row, total.txt downloaded with
# the sum, and the sandbox deleted and settled (charged + released = reserved, nothing live).
. "$(dirname "$0")/lib.sh"
cd "$TOP" || fail "no TOP"
[ -d "$EPHEMERAL_IMAGE" ] || skip "no sandbox image at $EPHEMERAL_IMAGE (make image)"
start_server

out=$(PYTHONPATH=$TOP/clients/python/src python3 examples/drive-a-sandbox/drive.py "$TEST_TMP/total.txt" 2>&1) ||
    fail "drive.py failed: $out"
printf '%s\n' "$out"
assert_contains "$out" "uploaded data/cities.csv (51 bytes)" "the upload"
# the output in order, as the command wrote it
assert_contains "$out" "$(printf 'Lyon 522000\nNantes 320000\nLille 236000\ntotal 1078000')" "the output"
assert_contains "$out" "Lyon 522000" "the first row streamed"
assert_contains "$out" "total 1078000" "the total streamed"
assert_contains "$out" "exit 0" "the command's exit"
assert_eq "$(cat "$TEST_TMP/total.txt")" 1078000 "total.txt downloaded"
id=$(sed -n 's/^\(sbx_[0-9a-f]\{32\}\) ready$/\1/p' <<<"$out")
[ -n "$id" ] || fail "no sandbox id printed: $out"
api() { curl -sS "$EPHEMERAL_URL$1" -H "Authorization: Bearer $EPHEMERAL_API_KEY"; }
final=$(api "/v1/sandboxes/$id")
assert_eq "$(jq -r .status <<<"$final")" stopped "the sandbox was deleted"
jq -e '.cost.charged_micros + .cost.released_micros == .cost.reserved_micros' <<<"$final" >/dev/null ||
    fail "not settled: $final"
assert_contains "$out" "stopped: charged" "the money printed"
