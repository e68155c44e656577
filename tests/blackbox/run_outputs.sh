#!/bin/bash
# A run's outputs (docs/API.md, "Outputs") through the real server, on every backend this host
# has: the files the run's patterns name come back after the agent finished, listed with their
# size, sha256 and type and served byte for byte; a symlink to /etc/passwd comes back as a symlink
# with its target and no content; 104 files against outputs.max_files 100 give 100 and 4 skipped
# with their reason in the outputs.collected event (the patterns' order decides which); a path
# not listed and another org's run are 404;
# bad patterns are 400 with nothing reserved; under zero data retention the outputs reach only the
# client waiting on the list (Prefer: wait, bytes inline), and none of their bytes are in the SQLite
# file.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/agent_common.sh"
. "$(dirname "$0")/api_common.sh"
cd "$TOP"
[ -d "$EPHEMERAL_IMAGE" ] || skip "no sandbox image at $EPHEMERAL_IMAGE (make image)"

MARK="outputs-mark-$RANDOM$RANDOM"
ZMARK="zdr-mark-$RANDOM$RANDOM"
script() { # MARK: the report's second line, made by printf so that only the file holds it whole
    local cmd="mkdir -p out many && printf '# Report\\n%s-%s\\n' ${1%%-*} ${1#*-} > report.md && printf 'PNG' > out/c.png && ln -s /etc/passwd pw && i=0; while [ \$i -le 100 ]; do printf x > many/f\$(printf %03d \$i); i=\$((i+1)); done"
    jq -nc --arg c "$cmd" '[{tool_calls: [{id: "o1", name: "shell",
        arguments: ({command: $c} | tojson)}]}, {text: "done"}]'
}

backends=$(host_backends)
export EPHEMERAL_MICROVM_ALLOW_TCG=1

body='{"prompt": "make files", "model": "o", "max_cost_micros": 200000, "timeout_seconds": 300,
       "outputs": ["report.md", "out/**", "pw", "many/*"]}'
first=1
for b in $backends; do
    fake_start "o_$b" "$(script "$MARK")"
    fake_start "z_$b" "$(script "$ZMARK")"
    EPHEMERAL_TEST_SANDBOX=$b agent_server "$(jq -s . <(fake_model o openai "o_$b") <(fake_model z openai "z_$b"))"
    id=$(run_create "$body")
    run=$(run_wait "$id" 240)
    assert_eq "$(jq -r .status <<<"$run")" completed "$b: status ($(jq -c .error <<<"$run"))"
    out=$(api GET "/v1/runs/$id/outputs")
    assert_eq "${out##*HTTP }" 200 "$b: list"
    list=$(head -n 1 <<<"$out")
    assert_eq "$(jq -r .object <<<"$list")" list "$b: a list"
    assert_eq "$(jq '.data | length' <<<"$list")" 100 "$b: outputs.max_files"
    rep=$(jq -c '.data[] | select(.path == "report.md")' <<<"$list")
    want=$(printf '# Report\n%s\n' "$MARK")
    assert_eq "$(jq -r .size <<<"$rep")" "$((${#want} + 1))" "$b: report size (with its newline)"
    assert_eq "$(jq -r .sha256 <<<"$rep")" "$(printf '%s\n' "$want" | sha256sum | cut -d' ' -f1)" "$b: sha256"
    assert_eq "$(jq -r .content_type <<<"$rep")" "text/markdown; charset=utf-8" "$b: type"
    # The bytes, with the headers that keep a browser from guessing.
    curl -sS -D "$TEST_TMP/h" -o "$TEST_TMP/report.md" "$EPHEMERAL_URL/v1/runs/$id/outputs/report.md" \
        -H "Authorization: Bearer $EPHEMERAL_API_KEY"
    assert_eq "$(cat "$TEST_TMP/report.md")" "$want" "$b: report bytes"
    grep -qi '^x-content-type-options: nosniff' "$TEST_TMP/h" || fail "$b: nosniff: $(cat "$TEST_TMP/h")"
    grep -qi '^content-disposition' "$TEST_TMP/h" && fail "$b: text is shown inline"
    curl -sS -D "$TEST_TMP/h2" -o /dev/null "$EPHEMERAL_URL/v1/runs/$id/outputs/out/c.png" \
        -H "Authorization: Bearer $EPHEMERAL_API_KEY"
    grep -qi '^content-type: image/png' "$TEST_TMP/h2" || fail "$b: png type"
    curl -sS -D "$TEST_TMP/h3" -o /dev/null "$EPHEMERAL_URL/v1/runs/$id/outputs/many/f000" \
        -H "Authorization: Bearer $EPHEMERAL_API_KEY"
    grep -qi '^content-disposition: attachment; filename="f000"' "$TEST_TMP/h3" || fail "$b: attachment"
    # The symlink: listed with its target, nothing to download, /etc/passwd never read.
    pw=$(jq -c '.data[] | select(.path == "pw")' <<<"$list")
    assert_eq "$(jq -r .type <<<"$pw")" symlink "$b: symlink type"
    assert_eq "$(jq -r .target <<<"$pw")" /etc/passwd "$b: symlink target"
    assert_eq "$(jq -r .sha256 <<<"$pw")" null "$b: no content"
    out=$(api GET "/v1/runs/$id/outputs/pw")
    assert_error "$out" 404 not_found_error
    assert_not_contains "$out" "root:" "$b: /etc/passwd"
    # The 101st file: skipped, with its reason.
    ev=$(run_events "$id" | jq -c '.data[] | select(.type == "outputs.collected") | .data')
    # The patterns in their order: report.md, out/c.png and pw first, then 97 of many/*.
    assert_eq "$(jq -r .skipped_count <<<"$ev")" 4 "$b: skipped"
    assert_eq "$(jq -c '[.skipped[] | [.path, .reason]] | .[0]' <<<"$ev")" '["many/f097","max_files"]' "$b: reason"
    # Not listed, escaping, another org's.
    assert_error "$(api GET "/v1/runs/$id/outputs/nothere.txt")" 404 not_found_error
    assert_error "$(api GET "/v1/runs/$id/outputs/..%2F..%2Fetc%2Fpasswd")" 404 not_found_error
    if [ "$first" = 1 ]; then
        other=$(new_org "other_$b") || fail "second org"
        assert_error "$(as "$other" api GET "/v1/runs/$id/outputs")" 404 not_found_error
        assert_error "$(as "$other" api GET "/v1/runs/$id/outputs/report.md")" 404 not_found_error
        # Bad patterns: 400 naming the pattern, nothing reserved.
        before=$(api GET /v1/balance | head -n 1 | jq -c .)
        for p in '"../x"' '"/etc/passwd"' '""' '"a/../b"' '"x**"'; do
            out=$(api POST /v1/runs -H 'Content-Type: application/json' \
                -d "{\"prompt\": \"p\", \"max_cost_micros\": 1000, \"outputs\": [$p]}")
            assert_error "$out" 400 invalid_request_error 'outputs[0]'
        done
        out=$(api POST /v1/runs -H 'Content-Type: application/json' \
            -d "{\"prompt\": \"p\", \"max_cost_micros\": 1000, \"outputs\": $(jq -nc '[range(33) | "f\(.)"]')}")
        assert_error "$out" 400 invalid_request_error outputs
        assert_eq "$(api GET /v1/balance | head -n 1 | jq -c .)" "$before" "bad patterns reserve nothing"
        # Zero data retention: served to the waiting client, never in the store.
        zid=$(run_create "$(jq -c '.model = "z" | .zero_data_retention = true' <<<"$body")")
        # The waiting client: the list parks until the run ends and carries the bytes inline.
        zout=$(api GET "/v1/runs/$zid/outputs" -H 'Prefer: wait=240' --max-time 250)
        assert_eq "${zout##*HTTP }" 200 "$b: zdr list"
        zrun=$(run_wait "$zid" 240)
        assert_eq "$(jq -r .status <<<"$zrun")" completed "$b: zdr status"
        zwant=$(printf '# Report\n%s\n' "$ZMARK")
        assert_eq "$(head -n 1 <<<"$zout" | jq -r '.data[] | select(.path == "report.md") | .content_base64' | base64 -d)" \
            "$zwant" "$b: zdr report handed to the waiting client"
        # Afterwards nothing is held: the run is settled and its entry gone.
        assert_eq "$(api GET "/v1/runs/$zid/outputs" | head -n 1 | jq '.data | length')" 0 "$b: zdr list afterwards"
        zev=$(run_events "$zid" | jq -c '.data[] | select(.type == "outputs.collected") | .data')
        assert_eq "$(jq -r '.files // "none"' <<<"$zev")" none "$b: zdr event has no paths"
        stop_server
        grep -a -q "$ZMARK" "$DB" "$DB-wal" 2>/dev/null && fail "$b: a zdr output is in the SQLite file"
        first=0
    else
        stop_server
    fi
done
