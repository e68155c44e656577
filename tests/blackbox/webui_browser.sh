#!/bin/bash
# The web UI (issue 16, docs/WEBUI.md) in a real headless Chromium driven over WebDriver by
# tests/browser/test_webui.py, against a real ephemerald on a loopback port: static files and
# their headers, the playground and its curl/JSON, a live run, the seed example, replay timing,
# a replay_of run's divergences (the "diverged" badge, its message, the header's origin and
# count), reconnection with Last-Event-ID, cancel, the sanitiser, API errors in words, the
# keyboard path, a 390x844 screen, the runs list, the balance and the admin page, a run's outputs
# (stored and zero-data-retention). Screenshots go to $BUILD/test-logs/webui/. WEBUI_TESTS="name ..." runs only those tests (for working on them).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/api_common.sh"
command -v chromium >/dev/null && command -v chromedriver >/dev/null ||
    skip "no chromium or chromedriver (scripts/setup-deps.sh test installs them)"
have_image || skip "no sandbox image (make image)"
test_deadline 600

# The replay model's recordings: the seed example and the UI's fixtures.
transcripts=$TEST_TMP/transcripts
mkdir -p "$transcripts"
ln -s "$TOP/examples/sandbox-proof" "$transcripts/sandbox-proof"
ln -s "$FIXTURES/slow" "$transcripts/slow"
for d in "$TOP"/tests/fixtures/webui/*/; do ln -s "$d" "$transcripts/$(basename "$d")"; done
cat >"$TEST_TMP/config.json" <<JSON
{"default_model": "openai/gpt-6-luna",
 "secret_key_file": "$TEST_TMP/secret.key",
 "shutdown_grace_seconds": 1,
 "http": {"auth_failures_per_minute": 0},
 "webhooks": {"allow_private_cidrs": ["127.0.0.1/32"], "retry_base_ms": 300},
 "models": [{"id": "openai/gpt-6-luna", "provider": "replay", "transcripts": "$transcripts",
             "input_micros_per_mtok": 50000, "output_micros_per_mtok": 200000,
             "max_output_tokens": 1024}]}
JSON
start_server --config "$TEST_TMP/config.json"
MEMBER_KEY=$("$EPHD" admin key create --db "$DB" --org default --role member) || fail "member key"

shots=$BUILD/test-logs/webui
rm -rf "$shots"
WEBUI_SERVER=$EPHEMERAL_URL ADMIN_KEY=$EPHEMERAL_API_KEY MEMBER_KEY=$MEMBER_KEY SHOTS=$shots \
    TEST_TMP=$TEST_TMP SEED_REQUEST=$TOP/examples/sandbox-proof/request.json \
    SPACED_PROMPT=$(jq -r .prompt "$TOP/tests/fixtures/webui/spaced/request.json") \
    XSS_PROMPT=$(jq -r .prompt "$TOP/tests/fixtures/webui/xss/request.json") \
    DIVERGE_PROMPT=$(jq -r .prompt "$TOP/tests/fixtures/webui/diverge/request.json") \
    SLOW_PROMPT=$SLOW_PROMPT \
    LIVE_PROMPT=$(jq -r .prompt "$TOP/tests/fixtures/webui/live/request.json") \
    OUTPUTS_REQUEST=$TOP/tests/fixtures/webui/outputs/request.json \
    python3 -B "$TOP/tests/browser/test_webui.py" ${WEBUI_TESTS:-} &
py=$!
_pids+=("$py")
wait "$py" || fail "browser tests failed (screenshots in $shots)"
