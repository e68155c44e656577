#!/bin/bash
# Redaction of every form (docs/SECURITY.md, docs/BROKER.md), in a real sandbox through the real server: an
# upstream that echoes the credential it got (a Basic header's value, token, user and password,
# and a query value) raw, in other cases, percent-encoded, JSON-escaped, in hex, in base64 and
# base64url (whole and inside a larger base64 text), in its Location and Set-Cookie, in gzip and
# deflate bodies, and past 64 credential values (32 headers and a query key): nothing of it
# reaches the sandbox. A chunked answer's trailer is not spliced into the body. A body in an
# encoding the broker cannot read, a corrupt one and a gzip bomb are refused with 502, their JSON
# reason and an event, never relayed.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/agent_common.sh"
. "$(dirname "$0")/broker_common.sh"
cd "$TOP"
rnd() { head -c "$1" /dev/urandom | od -An -tx1 | tr -d ' \n'; }
USER_=canaryuser$(rnd 4)
PASS="pw/$(rnd 6)+x=y"
QKEY="qk$(rnd 6)a/b+c=d e"
MANY=mk$(rnd 8)
BASIC=$(printf '%s:%s' "$USER_" "$PASS" | base64 -w0)

upstream_start api
P=http://127.0.0.1:3128
# --compressed: the sandbox's curl would decode a compressed body the broker let through.
get() { echo "curl -sS -D - --compressed '$P/$1/allowed/forms?mode=$2'"; }
calls=$(jq -nc \
    --argjson plain "$(shell_call c1 "$(get forms plain)")" \
    --argjson gzip "$(shell_call c2 "$(get forms gzip)")" \
    --argjson deflate "$(shell_call c3 "$(get forms deflate)")" \
    --argjson trailer "$(shell_call c4 "$(get forms trailer)")" \
    --argjson many "$(shell_call c5 "$(get many many)")" \
    --argjson zstd "$(shell_call c6 "curl -sS -D - '$P/forms/allowed/forms?mode=zstd'")" \
    --argjson corrupt "$(shell_call c7 "curl -sS -D - '$P/forms/allowed/forms?mode=corrupt'")" \
    --argjson bomb "$(shell_call c8 "curl -sS -D - '$P/forms/allowed/forms?mode=bomb'")" \
    '[{tool_calls: [$plain, $gzip, $deflate, $trailer, $many, $zstd, $corrupt, $bomb]}, {text: "done"}]')
fake_start model "$calls"
broker_server "$(jq -s . <(fake_model fake openai model))" \
    '{"allow_private_cidrs": ["127.0.0.1/32"], "max_response_bytes": 4194304}'

conn=$(jq -cn --arg b "$BASIC" --arg q "$QKEY" --arg url "http://127.0.0.1:$UP_PORT" '{name: "forms",
    base_url: $url, methods: ["GET"], path_prefixes: ["/allowed"],
    headers: {"Authorization": ("Basic " + $b)}, query: {key: $q}}')
out=$(api POST /v1/connections -H 'Content-Type: application/json' -d "$conn")
assert_eq "${out##*HTTP }" 201 "create the forms connection: $out"
# 32 headers whose values have a space (each is two redaction values), then a query key.
conn=$(jq -cn --arg m "$MANY" --arg url "http://127.0.0.1:$UP_PORT" '{name: "many",
    base_url: $url, methods: ["GET"], path_prefixes: ["/allowed"],
    headers: ([range(32)] | map({key: "X-Key-\(.)", value: "v\(.) h\(.)-\($m)"}) | from_entries),
    query: {key: ("q-" + $m)}}')
out=$(api POST /v1/connections -H 'Content-Type: application/json' -d "$conn")
assert_eq "${out##*HTTP }" 201 "create the many-headers connection: $out"

id=$(run_create '{"prompt": "echo", "model": "fake", "max_cost_micros": 200000,
    "connections": ["forms", "many"]}')
run=$(run_wait "$id" 120)
assert_eq "$(jq -r .status <<<"$run")" completed "status ($(jq -c .error <<<"$run"))"
res() { tool_result model 1 "$1" | jq -r .stdout; }

# No form of any credential in what the sandbox got (case-insensitively where case carries no
# bits; base64 by the characters the value alone decides, at each alignment).
no_forms() { # WHAT TEXT VALUE...
    local what=$1 text=$2
    shift 2
    printf '%s' "$text" | python3 -c '
import base64, sys
sys.path.insert(0, sys.argv[1])
from broker_upstream import echo_forms
text = sys.stdin.buffer.read().decode("latin-1")
bad = []
for v in sys.argv[2:]:
    v = v.encode()
    for label, f in echo_forms(v):
        if label.startswith("b64-in"):
            a = int(label[-1])
            core = base64.b64encode(b"\0" * a + v).decode()[(8 * a + 5) // 6:(8 * a + 8 * len(v)) // 6]
            if core in text:
                bad.append(label)
        elif label.startswith(("b64", "json")):
            if f in text:
                bad.append(label)
        elif f.lower() in text.lower():
            bad.append(label)
if bad:
    sys.exit("leaked forms: " + " ".join(sorted(set(bad))))
' "$TOP/tests" "$@" || fail "$what: a form of the credential reached the sandbox"
}

for c in c1 c2 c3; do
    r=$(res $c)
    assert_contains "$r" "HTTP/1.1 200" "$c status"
    # The upstream did echo (labels present, values redacted), and no encoding is left.
    for label in raw upper pct pct-lower form json json-u b64 b64url-nopad hex HEX b64-in-2; do
        assert_contains "$r" "$label: " "$c: the upstream's $label echo"
    done
    assert_contains "$r" "raw: [REDACTED]" "$c: redacted"
    assert_not_contains "$(tr A-Z a-z <<<"$r")" "content-encoding" "$c: Content-Encoding dropped"
    no_forms "$c" "$r" "$USER_" "$PASS" "$QKEY" "$BASIC" "$USER_:$PASS" "Basic $BASIC"
done
# A decoded body goes with its own length.
len=$(res c2 | grep -i '^content-length:' | tr -dc 0-9)
assert_eq "$len" "$(tool_result model 1 c2 | jq '.stdout | split("\r\n\r\n")[1] | utf8bytelength')" \
    "gzip: the decoded body's length"
assert_contains "$(res c1)" "Location: /allowed/forms?mode=plain&key=[REDACTED]" "Location redacted"
assert_contains "$(res c1)" "Set-Cookie: s=[REDACTED]; Path=/" "Set-Cookie redacted"

# The trailer: dropped, not appended to the body.
r=$(res c4)
assert_contains "$r" "HTTP/1.1 200" "trailer: status"
assert_eq "${r#*$'\r\n\r\n'}" "hello" "trailer: the body alone"
assert_not_contains "$r" "trailer-text" "trailer: not relayed"

# 32 headers with a space (64 values), then the query key: still redacted.
r=$(res c5)
assert_contains "$r" "query raw: [REDACTED]" "many: query value redacted"
no_forms "many" "$r" "q-$MANY" "h31-$MANY"

# Refused without a byte of the body: 502, the JSON reason.
for c in "c6 unsupported_encoding" "c7 bad_encoding" "c8 response_too_large"; do
    r=$(res "${c%% *}")
    assert_contains "$r" "HTTP/1.1 502" "${c%% *}: status"
    assert_eq "$(printf '%s' "${r#*$'\r\n\r\n'}" | jq -r .error.code)" "${c#* }" "${c%% *}: reason"
    no_forms "${c%% *}" "$r" "$USER_" "$PASS" "$QKEY"
done
ev=$(run_events "$id")
assert_eq "$(jq -r '[.data[] | select(.type == "connection.request") | .data.denied // empty] | sort | join(",")' <<<"$ev")" \
    "bad_encoding,response_too_large,unsupported_encoding" "refusal events"
assert_eq "$(jq '[.data[] | select(.type == "connection.request" and .data.status == 502)] | length' <<<"$ev")" 3 "502 events"
# And the record of each exchange (what the sandbox got) holds none either.
no_forms "record" "$(jq -r '.data[] | .data.exchange // empty | .response.body_base64 | values | @base64d' <<<"$ev")" \
    "$USER_" "$PASS" "$QKEY" "q-$MANY"
# The upstream did get the credentials.
ups=$(upstream_requests api)
assert_eq "$(jq -r '.[0].headers.authorization' <<<"$ups")" "Basic $BASIC" "the credential reached the upstream"
echo ok
