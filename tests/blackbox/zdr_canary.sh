#!/bin/bash
# Zero data retention (docs/API.md, docs/SECURITY.md): unique canaries never reach the database files (SQLite
# with its -wal and -shm, or PostgreSQL's whole data directory) or the server's log (at debug
# level), while the client that waited on the run receives the result and the run's events are
# kept, reduced to what the sandbox did not choose.
#
# The canaries: in the prompt, a command's output and the model's answer (a recorded run); and in
# everything a sandbox or a model chooses (a scripted run): host names that resolve and that do
# not, for plain HTTP, CONNECT and web_fetch; URL paths and queries; request headers; a method;
# the name of a connection the org does not have and a path its connection refuses; command
# lines; a tool name the model invents; file names (the request's and the model's); the model's
# finish reason and refusal; a provider's error. A control run of each without zero data
# retention, searched the same way, finds every canary, so the misses are not a blind search.
#
# The test runs in a network and mount namespace of its own: an /etc/hosts of its own maps the
# "resolvable" canary names to 127.0.0.1, and the resolver is 127.0.0.1 where nothing listens, so
# an unresolvable name fails at once and no query leaves the machine. EPHEMERAL_TEST_SANDBOX picks
# the backend (gvisor_zdr_canary, microvm_zdr_canary), ZDR_CANARY_STORE=postgres the store
# (pg_zdr_canary).
if [ -z "${ZDR_CANARY_NS:-}" ]; then
    [ "$(id -u)" -eq 0 ] || { echo "skip: needs root for a network namespace of its own"; exit 77; }
    command -v unshare >/dev/null || { echo "skip: unshare (util-linux) is needed"; exit 77; }
    unshare --net --mount --propagation private true 2>/dev/null ||
        { echo "skip: this host cannot make a network and mount namespace"; exit 77; }
    export ZDR_CANARY_NS=1
    exec unshare --net --mount --propagation private "$0" "$@"
fi
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/agent_common.sh"
. "$(dirname "$0")/broker_common.sh"
cd "$TOP"

# ---- the namespace: loopback up, names of our own, no resolver ----
ip link set lo up || fail "cannot bring lo up"
C=zdrc4n4ry$(head -c 6 /dev/urandom | od -An -tx1 | tr -d ' \n')
{
    cat /etc/hosts
    printf '127.0.0.1 %srh.test %srt.test %sfr.test\n' "$C" "$C" "$C"
} >"$TEST_TMP/hosts"
printf 'nameserver 127.0.0.1\n' >"$TEST_TMP/resolv.conf"
mount --bind "$TEST_TMP/hosts" /etc/hosts || fail "cannot mount the test's /etc/hosts"
mount --bind "$TEST_TMP/resolv.conf" /etc/resolv.conf || fail "cannot mount the test's resolv.conf"
assert_eq "$(getent hosts "${C}rh.test" | awk '{print $1}')" 127.0.0.1 "a resolvable canary name"
getent hosts "${C}nh.test" >/dev/null && fail "an unresolvable canary name resolved"

if [ "${ZDR_CANARY_STORE:-sqlite}" = postgres ]; then
    . "$(dirname "$0")/pg_common.sh"
    pg_start
    export EPH_TEST_PG=$PG_URL PG_BIN
fi
# The files the store wrote: every one a search must cover.
store_files() {
    if [ -n "${EPH_TEST_PG:-}" ]; then
        find "$PG_DIR/data" -type f
    else
        for f in "$DB" "$DB-wal" "$DB-shm"; do [ -e "$f" ] && echo "$f"; done
    fi
    return 0
}
# The canary tags found in FILES... (each file read as bytes, case-insensitive), one a line.
found_tags() {
    local f
    for f in "$@"; do [ -e "$f" ] && grep -a -i -o -h "$C[a-z0-9]*" "$f"; done | tr 'A-Z' 'a-z' | sort -u
    return 0
}

# ---- the upstream, the models, the server ----
upstream_start site
U=$UP_PORT
P=http://127.0.0.1:3128
q() { printf '%s' "curl -sS -m 20 -o /dev/null -w '%{http_code} %{http_connect}\\n' $*"; }
# One turn of tool calls with a canary in every field the sandbox or the model chooses, then
# (a turn with a canary finish reason) the model's refusal, with a canary too.
cmd="echo ${C}cl >/dev/null
curl -sS -m 20 -H 'X-Zdr: ${C}hd' -A '${C}ua' 'http://127.0.0.1:$U/${C}pa?q=${C}qu'; echo
$(q "http://${C}rh.test:$U/x")
$(q "http://${C}nh.test/x")
$(q -p "http://${C}rt.test:$U/x")
$(q -p "http://${C}nt.test:$U/x")
$(q -X "${C}me" "http://127.0.0.1:$U/m")
curl -sS -m 20 '$P/echo/allowed/${C}cp?x=${C}cq'; echo
$(q "$P/echo/${C}cd")
$(q "$P/${C}cu/x")"
script_a=$(jq -nc --arg C "$C" --arg U "$U" --argjson sh "$(shell_call s1 "$cmd")" '
    def call(id; name; args): {id: id, name: name, arguments: (args | tojson)};
    [{finish_reason: ($C + "fin"), tool_calls: [$sh,
        call("f1"; "web_fetch"; {url: ("http://" + $C + "fr.test:" + $U + "/" + $C + "fp?" + $C + "fq")}),
        call("f2"; "web_fetch"; {url: ("http://" + $C + "fn.test/")}),
        call("t1"; $C + "tool"; {}),
        call("w1"; "write_file"; {path: ($C + "fi.txt"), content: "x"}),
        call("r1"; "read_file"; {path: ($C + "fm.txt")})]},
     {refusal: ("I will not " + $C + "rf")}]')
script_c=$(jq -nc --arg C "$C" '[{status: 400, error: ("bad request: " + $C + "pe")}]')
fake_start za "$script_a"
fake_start zc "$script_c"
fake_start ca "$script_a"
fake_start cc "$script_c"
models=$(jq -s --arg t "$TOP/tests/fixtures/zdr" '
    [{id: "replay", provider: "replay", transcripts: $t, input_micros_per_mtok: 50000,
      output_micros_per_mtok: 200000}] + .' \
    <(fake_model za openai za) <(fake_model zc openai zc) <(fake_model ca openai ca) \
    <(fake_model cc openai cc))
jq -n --argjson models "$models" --arg key "$TEST_TMP/secret.key" \
    '{default_model: "replay", log_level: "debug", models: $models, secret_key_file: $key,
      broker: {allow_private_cidrs: ["127.0.0.1/32"], web_private_cidrs: ["127.0.0.1/32"]}}' \
    >"$TEST_TMP/config.json" || fail "config"
start_server --config "$TEST_TMP/config.json" \
    ${EPHEMERAL_TEST_SANDBOX:+--sandbox "$EPHEMERAL_TEST_SANDBOX"}
if [ -n "${EPH_TEST_PG:-}" ]; then
    # Every text column stored uncompressed (PostgreSQL compresses a long value in place): a
    # canary in a long event would otherwise hide from the search, in the runs and the control.
    "$PG_BIN/psql" -X -q -A -t "$DB" -c "SELECT format('ALTER TABLE %I ALTER COLUMN %I SET
        STORAGE EXTERNAL;', table_name, column_name) FROM information_schema.columns
        WHERE table_schema = 'public' AND data_type = 'text'" | "$PG_BIN/psql" -X -q "$DB" ||
        fail "cannot turn compression off"
fi
conn=$(jq -cn --arg url "http://127.0.0.1:$U" '{name: "echo", base_url: $url, methods: ["GET"],
    path_prefixes: ["/allowed"], headers: {"Authorization": "Bearer not-a-canary"}}')
out=$(api POST /v1/connections -H 'Content-Type: application/json' -d "$conn")
assert_eq "${out##*HTTP }" 201 "create connection: $out"
body_a() { # MODEL ZDR
    jq -nc --arg C "$C" --arg m "$1" --argjson z "$2" '{prompt: ("scripted " + $C + "pr"),
        model: $m, max_cost_micros: 2000000, web: true, shell: true, connections: ["echo"],
        timeout_seconds: 240, zero_data_retention: $z,
        files: [{path: ($C + "rq.txt"), content: ("request file " + $C + "rc")}]}'
}
body_c() { # MODEL ZDR
    jq -nc --arg C "$C" --arg m "$1" --argjson z "$2" '{prompt: ("failing " + $C + "pc"),
        model: $m, max_cost_micros: 100000, timeout_seconds: 240, zero_data_retention: $z}'
}

# ---- the recorded run: prompt, output and answer ----
prompt=$(jq -r .prompt tests/fixtures/zdr/canary/request.json)
canary_prompt=zdr-prompt-c4n4ry-5e1f
canary_output=zdr-output-c4n4ry-77ab
canary_answer=zdr-answer-c4n4ry-9d2e
assert_contains "$prompt" "$canary_prompt" "fixture prompt"

# The scripted runs go first: they run beside the recorded ones.
za_id=$(run_create "$(body_a za true)")
zc_id=$(run_create "$(body_c zc true)")

out=$(api POST /v1/runs -H 'Content-Type: application/json' -H 'Prefer: wait=240' \
    -d "$(jq -n --arg p "$prompt" '{prompt: $p, max_cost_micros: 40000, zero_data_retention: true, timeout_seconds: 240}')")
assert_eq "${out##*HTTP }" 201 "create"
run=$(head -n 1 <<<"$out")
id=$(jq -r .id <<<"$run")
assert_eq "$(jq -r .status <<<"$run")" completed "status ($(jq -c .error <<<"$run"))"
# The waiting client got the result, with the real output in it.
assert_contains "$(jq -r .result <<<"$run")" "$canary_output" "result delivered (output)"
assert_contains "$(jq -r .result <<<"$run")" "$canary_answer" "result delivered (answer)"
assert_eq "$(jq -r .permissions.zero_data_retention <<<"$run")" true "flag"

# Afterwards the result is gone; the timeline remains, redacted.
again=$(api GET "/v1/runs/$id" | head -n 1)
assert_eq "$(jq -r .result <<<"$again")" null "result after delivery"
assert_eq "$(jq -r .status <<<"$again")" completed "status kept"
assert_eq "$(jq .usage.shell_commands <<<"$again")" 1 "usage kept"
events=$(api GET "/v1/runs/$id/events" | head -n 1)
assert_eq "$(jq -r '.data[] | select(.type=="shell.command") | .message' <<<"$events")" \
    shell.command "shell event redacted to its type"
assert_eq "$(jq '.data[] | select(.type=="shell.command") | .data | has("stdout") or has("stderr")' <<<"$events")" \
    false "no outputs in events"

# A client following the event stream gets the result once, as an unnumbered event just before
# the final one. (The command sleeps six seconds, so the stream is open before the run ends, even
# on a loaded machine: a client that comes after the end gets no result, by design.)
out=$(api POST /v1/runs -H 'Content-Type: application/json' \
    -d "$(jq -n --arg p "$prompt" '{prompt: $p, max_cost_micros: 40000, zero_data_retention: true, timeout_seconds: 240}')")
id2=$(head -n 1 <<<"$out" | jq -r .id)
stream=$(curl -sS -N --max-time 240 "$EPHEMERAL_URL/v1/runs/$id2/events" \
    -H "Authorization: Bearer $EPHEMERAL_API_KEY" -H 'Accept: text/event-stream')
assert_contains "$stream" "event: result" "result event on the stream"
result_line=$(grep -n '^event: result' <<<"$stream" | cut -d: -f1)
final_line=$(grep -n '^event: worker.destroyed' <<<"$stream" | cut -d: -f1)
[ -n "$result_line" ] && [ -n "$final_line" ] && [ "$result_line" -lt "$final_line" ] ||
    fail "the result event must come just before worker.destroyed"
assert_contains "$(grep -A1 '^event: result' <<<"$stream")" "$canary_answer" "result on the stream"
# The client prints it, though the server keeps it nowhere.
cli_out=$("$EPH" run --prompt "$prompt" --zdr --max-cost-micros 40000 --timeout 240 2>&1) ||
    fail "ephemeral run --zdr: $cli_out"
assert_contains "$cli_out" "$canary_answer" "result printed by the client"

# ---- the scripted runs: everything the sandbox and the model chose ----
run=$(run_wait "$za_id" 300)
assert_eq "$(jq -r .status <<<"$run")" failed "scripted status"
assert_eq "$(jq -r .error.code <<<"$run")" model_refused "scripted error"
[ -z "${EPHEMERAL_TEST_SANDBOX:-}" ] ||
    assert_eq "$(jq -r .sandbox.backend <<<"$run")" "$EPHEMERAL_TEST_SANDBOX" "the backend"
assert_eq "$(jq -r .error.message <<<"$run")" \
    "the details are not kept: the run has zero data retention" "refusal not quoted"
# The requests were made, canaries and all (the test is not vacuous): what the command printed.
res=$(tool_result za 1 s1 | jq -r .stdout)
assert_contains "$res" "GET /${C}pa?q=${C}qu" "the plain request"
# The resolvable name answered, the other did not resolve (502), the same through CONNECT; the
# canary method reached the upstream (which does not implement it: 501).
assert_contains "$res" "200 000
502 000
200 200
000 502
501 000" "the requests to canary hosts"
assert_contains "$(upstream_requests site)" "${C}rh.test" "the resolvable name reached the upstream"
assert_contains "$(upstream_requests site)" "/allowed/${C}cp" "the connection's request"
assert_eq "$(tool_result za 1 f1 | jq .status)" 200 "web_fetch of a resolvable canary name"
assert_contains "$(tool_result za 1 t1)" "unknown tool" "the invented tool rejected"
ev=$(run_events "$za_id")
assert_eq "$(jq '[.data[] | select(.type == "web.request" or .type == "connection.request")] | length' <<<"$ev")" 13 \
    "broker and web_fetch events"
# (web_fetch's own event, the tool call's, keeps its numbers: the turn, and the status.)
assert_eq "$(jq -c '[.data[] | select(.type == "web.request" or .type == "connection.request")
    | .data | keys - ["method", "status", "bytes_up", "bytes_down", "duration_ms", "cost_micros",
                      "connection", "denied", "turn", "redirects"]
    | select(length > 0)]' <<<"$ev")" '[]' "broker events keep only what the sandbox did not choose"
assert_eq "$(jq -c '[.data[] | select(.type == "connection.request") | .data.connection] | sort' <<<"$ev")" \
    '["?","echo","echo"]' "connection names: the org's, or the fixed word"
assert_contains "$(jq -c '[.data[] | .message]' <<<"$ev")" '"OTHER web → ' "the canary method shown as OTHER"
run=$(run_wait "$zc_id" 300)
assert_eq "$(jq -r .error.code <<<"$run")" model_error "provider error"
assert_eq "$(jq -r .error.message <<<"$run")" \
    "the details are not kept: the run has zero data retention" "provider error not quoted"

# ---- the search: first as the files are while the server runs (SQLite's WAL holds every page
# written since the last checkpoint, overwritten pages too); then once it stopped, so that
# everything it would write is written ----
mapfile -t files < <(store_files)
leaked=$(found_tags "${files[@]}" "$SERVER_LOG")
[ -z "$leaked" ] || fail "canaries kept with zero data retention (server running): $(echo $leaked)"
kill -TERM "$SERVER_PID"
wait "$SERVER_PID"
mapfile -t files < <(store_files)
[ "${#files[@]}" -gt 0 ] || fail "no store file to search"
for f in "${files[@]}" "$SERVER_LOG"; do
    for c in "$canary_prompt" "$canary_output" "$canary_answer"; do
        if grep -a -q "$c" "$f"; then fail "canary $c found in $f"; fi
    done
done
leaked=$(found_tags "${files[@]}" "$SERVER_LOG")
[ -z "$leaked" ] || fail "canaries kept with zero data retention: $(echo $leaked) ($(grep -a -i -l "$C" "${files[@]}" "$SERVER_LOG" | tr '\n' ' '))"

# ---- the control: the same runs without zero data retention are kept, and found ----
port=${EPHEMERAL_URL##*:}
"$EPHD" serve --listen "127.0.0.1:$port" --db "$DB" --config "$TEST_TMP/config.json" \
    ${EPHEMERAL_TEST_SANDBOX:+--sandbox "$EPHEMERAL_TEST_SANDBOX"} >>"$TEST_TMP/control.log" 2>&1 &
SERVER_PID=$!
_pids+=("$SERVER_PID")
for _ in $(seq 600); do curl -fsS "$EPHEMERAL_URL/healthz" >/dev/null 2>&1 && break; sleep 0.05; done
ca_id=$(run_create "$(body_a ca false)")
cc_id=$(run_create "$(body_c cc false)")
out=$(api POST /v1/runs -H 'Content-Type: application/json' -H 'Prefer: wait=240' \
    -d "$(jq -n --arg p "$prompt" '{prompt: $p, max_cost_micros: 40000, timeout_seconds: 240}')")
assert_eq "$(head -n 1 <<<"$out" | jq -r .status)" completed "control run"
assert_eq "$(run_wait "$ca_id" 300 | jq -r .error.code)" model_refused "control scripted run"
assert_eq "$(run_wait "$cc_id" 300 | jq -r .error.code)" model_error "control failing run"
kill -TERM "$SERVER_PID"
wait "$SERVER_PID"
mapfile -t files < <(store_files)
for c in "$canary_prompt" "$canary_output" "$canary_answer"; do
    cat "${files[@]}" | grep -a -q "$c" || fail "control: canary $c not found: the search is blind"
done
kept=$(found_tags "${files[@]}" "$TEST_TMP/control.log")
for t in cl hd ua pa qu rh nh rt nt me cp cq cd cu fr fp fq fn tool fi fm rq pr fin rf pc pe; do
    grep -q -x "$C$t" <<<"$kept" || fail "control: canary $C$t not found: the search is blind there"
done
echo "no canary in the store or the log (${#files[@]} store files) on ${EPHEMERAL_TEST_SANDBOX:-the default backend}"
