#!/bin/bash
# The report-and-chart example (examples/report-chart) replayed by the default model: its run
# writes report.md and a PNG made with python3's zlib and struct, and both come back as outputs,
# through the CLI's run and then the API, byte for byte what the sandbox made.
. "$(dirname "$0")/lib.sh"
cd "$TOP" || fail "no TOP"
export NO_COLOR=1
[ -d "$EPHEMERAL_IMAGE" ] || skip "no sandbox image at $EPHEMERAL_IMAGE (make image)"
start_server

id=$("$EPH" run examples/report-chart/request.json --json | jq -r .id) || fail "run exit"
api() { curl -sS "$EPHEMERAL_URL$1" -H "Authorization: Bearer $EPHEMERAL_API_KEY" "${@:2}"; }
assert_eq "$(api "/v1/runs/$id" | jq -r .status)" completed "the example completed"
list=$(api "/v1/runs/$id/outputs")
assert_eq "$(jq -c '[.data[] | [.path, .type, .content_type]]' <<<"$list")" \
    '[["chart.png","file","image/png"],["report.md","file","text/markdown; charset=utf-8"]]' "outputs"
api "/v1/runs/$id/outputs/chart.png" -o "$TEST_TMP/chart.png"
assert_eq "$(head -c 8 "$TEST_TMP/chart.png" | od -An -tx1 | tr -d ' \n')" 89504e470d0a1a0a "a PNG"
assert_eq "$(sha256sum <"$TEST_TMP/chart.png" | cut -d' ' -f1)" \
    "$(jq -r '.data[] | select(.path == "chart.png") | .sha256' <<<"$list")" "its sha256"
assert_contains "$(api "/v1/runs/$id/outputs/report.md")" "17 primes: 2 3 5 7" "the report"

# ephemeral outputs: listed, then written under a directory, byte for byte; a second download
# into the same directory refuses to overwrite; a planted symlink in DIR is not followed.
out=$("$EPH" outputs "$id") || fail "outputs exit"
assert_contains "$out" "report.md" "outputs lists the report"
mkdir "$TEST_TMP/dl"
"$EPH" outputs "$id" --dir "$TEST_TMP/dl" >/dev/null || fail "outputs --dir exit"
cmp "$TEST_TMP/dl/chart.png" "$TEST_TMP/chart.png" || fail "the downloaded chart differs"
"$EPH" outputs "$id" --dir "$TEST_TMP/dl" >/dev/null 2>"$TEST_TMP/again.err" && fail "overwrote a file"
mkdir "$TEST_TMP/dl2"
ln -s "$TEST_TMP/victim" "$TEST_TMP/dl2/report.md"
"$EPH" outputs "$id" --dir "$TEST_TMP/dl2" >/dev/null 2>&1 && fail "wrote through a symlink"
[ -e "$TEST_TMP/victim" ] && fail "the symlink's target was written"
"$EPH" outputs "$id" --dir "$TEST_TMP/nothere" 2>/dev/null
assert_eq "$?" 2 "a missing directory is a usage error"
true

# ephemeral run --download DIR: the run, then its outputs written under DIR.
mkdir "$TEST_TMP/dl3"
"$EPH" run examples/report-chart/request.json --download "$TEST_TMP/dl3" >/dev/null || fail "run --download exit"
assert_contains "$(cat "$TEST_TMP/dl3/report.md")" "17 primes" "run --download wrote the report"
[ "$(head -c 4 "$TEST_TMP/dl3/chart.png" | od -An -c | tr -d ' ')" = "211PNG" ] || fail "run --download: the chart"
"$EPH" run examples/report-chart/request.json --download "$TEST_TMP/dl3" --detach 2>/dev/null
assert_eq "$?" 2 "--download with --detach is a usage error"
true
