#!/bin/bash
# The command-line conventions of both programs (docs/CLI.md): --version; --help on every command
# and subcommand, exit 0, listing every flag the parsers accept; exit statuses that tell a usage
# error (2), an unreachable server (3), a refused request (4), a server error (5) and a run that
# did not complete (1) apart; --json errors as the API's JSON; list --after and --metadata, run
# --metadata; and one message, not one per retry, when the server goes away under a run.
. "$(dirname "$0")/lib.sh"
cd "$TOP" || fail "no TOP"
export NO_COLOR=1

# --version: the program's name and the project's version, exit 0.
version=$(sed -n 's/^#define EPH_VERSION "\(.*\)"$/\1/p' src/common/version.h)
[ -n "$version" ] || fail "no EPH_VERSION in src/common/version.h"
for prog in ephemeral ephemerald ephemeral-sandbox; do
    out=$("$BUILD/$prog" --version); rc=$?
    assert_eq "$rc" 0 "$prog --version exit"
    assert_eq "$out" "$prog $version" "$prog --version"
done

# --help: on stdout, exit 0, nothing on stderr, and every flag its parser knows. The flags are
# read from the parsers' own tables, so a flag added without its help line fails here.
help_of() { # what prog args... -> stdout of `prog args... --help`
    local what=$1; shift
    local out rc
    out=$("$@" --help 2>"$TEST_TMP/help.err"); rc=$?
    assert_eq "$rc" 0 "exit status of '$what --help'"
    assert_eq "$(cat "$TEST_TMP/help.err")" "" "stderr of '$what --help'"
    assert_contains "$out" "usage: " "usage of '$what --help'"
    printf '%s\n' "$out"
}
flags_listed() { # help flags... : every flag appears in the help
    local help=$1; shift
    local f
    [ $# -gt 0 ] || fail "no flags found in the parser's source"
    for f in "$@"; do
        grep -qE -- "(^|[ [|])$f([] =,]|$)" <<<"$help" || fail "the help does not list $f: $help"
    done
}
# request.c's table says which options are run's and which sandbox create's (its last column).
run_flags=$(grep '{"--[a-z-]*"' src/cli/request.c | grep -v SANDBOX_ONLY | grep -o '{"--[a-z-]*"' | tr -d '{"')
flags_listed "$(help_of "ephemeral run" "$EPH" run)" $run_flags
create_flags=$(grep '{"--[a-z-]*"' src/cli/request.c | grep -v RUN_ONLY | grep -o '{"--[a-z-]*"' | tr -d '{"')
flags_listed "$(help_of "ephemeral sandbox create" "$EPH" sandbox create)" $create_flags
list_flags=$(grep -o 'opt_value(argc, argv, &i, "--[a-z-]*"' src/cli/runs.c | grep -o -- '--[a-z-]*')
flags_listed "$(help_of "ephemeral list" "$EPH" list)" $list_flags --json
flags_listed "$(help_of "ephemeral sandbox list" "$EPH" sandbox list)" $list_flags --json
exec_flags=$(sed -n '/^static int exec_parse(/,/^}/p' src/cli/sandbox.c | grep -oE '"--[a-z-]*"' | tr -d '"' | sort -u)
flags_listed "$(help_of "ephemeral sandbox exec" "$EPH" sandbox exec)" $exec_flags
for cmd in get rm ls; do
    flags_listed "$(help_of "ephemeral sandbox $cmd" "$EPH" sandbox $cmd)" --json
done
for cmd in cp watch; do
    help_of "ephemeral sandbox $cmd" "$EPH" sandbox $cmd >/dev/null
done
help_of "ephemeral sandbox" "$EPH" sandbox >/dev/null
assert_contains "$("$EPH" sandbox help exec)" "--background" "ephemeral sandbox help exec"
for cmd in get cancel balance; do
    flags_listed "$(help_of "ephemeral $cmd" "$EPH" $cmd)" --json
done
for cmd in watch replay transcript; do
    help_of "ephemeral $cmd" "$EPH" $cmd >/dev/null
done
assert_contains "$("$EPH" help list)" "--after RUN_ID" "ephemeral help list"

server_flags=$(sed -n '/server_opts\[\]/,/NULL/p' src/daemon/options.c | grep -o '"--[a-z-]*"' | tr -d '"')
flags_listed "$(help_of "ephemerald serve" "$EPHD" serve)" $server_flags
# Each admin command: its own flags (the `extra` table of its function in admin.c, and the
# repeatable ones) and the server's.
admin_flags() { # function name in admin.c
    sed -n "/^static int $1(/,/^}/p" src/daemon/admin.c | grep -o '"--[a-z-]*"' | tr -d '"' | sort -u
}
flags_listed "$(help_of "ephemerald admin init" "$EPHD" admin init)" $(admin_flags admin_init) $server_flags
flags_listed "$(help_of "ephemerald admin key create" "$EPHD" admin key create)" \
    $(admin_flags admin_key) $server_flags
flags_listed "$(help_of "ephemerald admin credit" "$EPHD" admin credit)" $(admin_flags admin_credit) \
    $server_flags
repeated=$(sed -n '/^static int take_repeated(/,/^}/p' src/daemon/admin.c | grep -o '"--[a-z-]*"' | tr -d '"')
flags_listed "$(help_of "ephemerald admin connection add" "$EPHD" admin connection add)" \
    $(admin_flags admin_connection) $repeated $server_flags
sandbox_flags=$(sed -n '/struct option/,/{0/p' src/daemon/sandbox_cmd.c | grep -o '{"[a-z-]*"' |
    tr -d '{"' | grep -v '^help$' | sed 's/^/--/')
flags_listed "$(help_of "ephemerald sandbox run" "$EPHD" sandbox run)" $sandbox_flags
flags_listed "$(help_of "ephemeral-sandbox run" "$BUILD/ephemeral-sandbox" run)" $sandbox_flags
flags_listed "$(help_of "ephemerald image build" "$EPHD" image build)" --dir --verbose
help_of "ephemerald admin" "$EPHD" admin >/dev/null
# --help is taken before anything runs: no database is made for it.
"$EPHD" admin init --db "$TEST_TMP/never.db" --help >/dev/null || fail "admin init --help"
[ ! -e "$TEST_TMP/never.db" ] || fail "admin init --help opened the store"

# The exit statuses, against a real server. The sleepy fixture's run waits in a long command, so a
# run can be cancelled (exit 1) and the server can be lost under it (exit 3) below.
mkdir -p "$TEST_TMP/sleepy"
cp -r tests/fixtures/sleepy/long "$TEST_TMP/sleepy/"
cp -r examples/sandbox-proof "$TEST_TMP/sleepy/"
cat >"$TEST_TMP/config.json" <<JSON
{"default_model": "replay",
 "models": [{"id": "replay", "provider": "replay", "transcripts": "$TEST_TMP/sleepy",
             "input_micros_per_mtok": 50000, "output_micros_per_mtok": 200000}]}
JSON
start_server --config "$TEST_TMP/config.json" --sandbox namespaces
sleepy=$(jq -r .prompt tests/fixtures/sleepy/long/request.json)

"$EPH" run --bogus >/dev/null 2>&1
assert_eq "$?" 2 "usage error"
"$EPH" get run_00000000000000000000000000000000 >/dev/null 2>&1
assert_eq "$?" 4 "an unknown run (404)"
EPHEMERAL_API_KEY="eph_$(printf 'Z%.0s' $(seq 40))" "$EPH" balance >/dev/null 2>&1
assert_eq "$?" 4 "a wrong key (401)"
port=$(free_port)
EPHEMERAL_URL="http://127.0.0.1:$port" "$EPH" balance >/dev/null 2>&1
assert_eq "$?" 3 "nobody listening"

# A server error: a stand-in that answers 500 with the API's error shape, and one that answers
# 502 with a page that is not JSON.
cat >"$TEST_TMP/fail_server.py" <<'PY'
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path.startswith("/v1/balance"):
            body = b'{"error": {"type": "api_error", "code": "store_unavailable", "message": "the store is down"}}'
            self.send_response(500); ctype = "application/json"
        else:
            body = b"<html>bad gateway</html>"
            self.send_response(502); ctype = "text/html"
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers(); self.wfile.write(body)
    def log_message(self, *a): pass
s = http.server.HTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
PY
python3 "$TEST_TMP/fail_server.py" >"$TEST_TMP/fail.port" &
_pids+=("$!")
for _ in $(seq 100); do [ -s "$TEST_TMP/fail.port" ] && break; sleep 0.05; done
fail_url="http://127.0.0.1:$(cat "$TEST_TMP/fail.port")"
EPHEMERAL_URL=$fail_url "$EPH" balance >/dev/null 2>"$TEST_TMP/500.err"
assert_eq "$?" 5 "a 500 answer"
assert_contains "$(cat "$TEST_TMP/500.err")" "the store is down" "the server's message"
EPHEMERAL_URL=$fail_url "$EPH" get run_00000000000000000000000000000000 >/dev/null 2>&1
assert_eq "$?" 5 "a 502 answer that is not JSON"

# --json: the failure on stdout as the API's error object, parseable by a script.
out=$("$EPH" get run_00000000000000000000000000000000 --json 2>/dev/null)
assert_eq "$?" 4 "--json 404 exit"
assert_eq "$(jq -r .error.type <<<"$out")" not_found_error "--json 404 error type"
out=$(EPHEMERAL_URL="http://127.0.0.1:$port" "$EPH" list --json 2>/dev/null)
assert_eq "$?" 3 "--json unreachable exit"
assert_eq "$(jq -r .error.type <<<"$out")" connection_error "--json unreachable error type"
out=$(EPHEMERAL_URL=$fail_url "$EPH" balance --json 2>/dev/null)
assert_eq "$(jq -r .error.code <<<"$out")" store_unavailable "--json 500 is the server's error"
out=$(printf '{"prompt": "x", "max_cost_micros": 1, "bogus": 1}' | "$EPH" run - --json 2>/dev/null)
assert_eq "$?" 4 "--json refused run exit"
assert_eq "$(jq -r .error.param <<<"$out")" bogus "--json refused run names the field"

# run --metadata, and list --after: three runs, paged one at a time, newest first.
ids=()
for i in 1 2 3; do
    id=$("$EPH" run examples/sandbox-proof/request.json --metadata "batch=b$$" --metadata "n=$i" \
        --detach) || fail "run $i --detach"
    ids+=("$id")
done
assert_eq "$("$EPH" get "${ids[1]}" --json | jq -c .metadata)" "{\"batch\":\"b$$\",\"n\":\"2\"}" \
    "metadata from --metadata"
"$EPH" run --prompt x --budget 1 --metadata novalue >/dev/null 2>&1
assert_eq "$?" 2 "--metadata without '='"
"$EPH" run --prompt x --budget 1 --metadata a=1 --metadata a=2 >/dev/null 2>&1
assert_eq "$?" 2 "--metadata key twice"
first=$("$EPH" list --limit 1 --json | jq -r '.data[0].id')
assert_eq "$first" "${ids[2]}" "the newest run first"
second=$("$EPH" list --limit 1 --after "$first" --json | jq -r '.data[0].id')
assert_eq "$second" "${ids[1]}" "list --after pages on"
text=$("$EPH" list --limit 1)
assert_contains "$text" "ephemeral list --after $first" "the text list says how to page on"
"$EPH" list --after not-a-run >/dev/null 2>&1
assert_eq "$?" 2 "list --after a bad id"

# A run that ends otherwise: cancelled while it waits in its command, exit 1 from watch.
id=$("$EPH" run --prompt "$sleepy" --budget 0.05 --detach) || fail "sleepy run"
for _ in $(seq 200); do
    [ "$("$EPH" get "$id" --json | jq -r .status)" = running ] && break
    sleep 0.05
done
"$EPH" cancel "$id" >/dev/null || fail "cancel"
"$EPH" watch "$id" >/dev/null 2>&1
assert_eq "$?" 1 "watch of a cancelled run"

# The server lost under a live run: the client tries again for a while, then says so once and
# exits 3 (not once per attempt).
"$EPH" run --prompt "$sleepy" --budget 0.05 >"$TEST_TMP/lost.out" 2>"$TEST_TMP/lost.err" &
cli=$!
_pids+=("$cli")
# The model call that issues the long command is on the client's screen: the run is live.
for _ in $(seq 200); do grep -q '  Model  ' "$TEST_TMP/lost.out" && break; sleep 0.05; done
grep -q '  Model  ' "$TEST_TMP/lost.out" || fail "the run never got going: $(cat "$TEST_TMP/lost.out")"
kill -KILL "$SERVER_PID"
wait "$SERVER_PID" 2>/dev/null
wait "$cli"
rc=$?
cat "$TEST_TMP/lost.err" >&2
assert_eq "$rc" 3 "exit status when the server is gone"
assert_eq "$(grep -c 'cannot reach' "$TEST_TMP/lost.err")" 1 "messages about the lost server"
assert_contains "$(cat "$TEST_TMP/lost.err")" "ephemeral watch run_" "the message says how to resume"

# A restart on the same store settles what the killed server left (and destroys its sandbox).
port=${EPHEMERAL_URL##*:}
"$EPHD" serve --listen "127.0.0.1:$port" --db "$DB" --config "$TEST_TMP/config.json" \
    --sandbox namespaces >>"$SERVER_LOG" 2>&1 &
SERVER_PID=$!
_pids+=("$SERVER_PID")
for _ in $(seq 300); do curl -fsS "$EPHEMERAL_URL/healthz" >/dev/null 2>&1 && break; sleep 0.05; done
echo ok
