#!/bin/bash
# docs/openapi.yaml against the live server: every documented operation is called, every answer's
# status must be documented for it and its body must validate against the documented schema, and
# every documented status is provoked (tests/blackbox/openapi_check.py).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/api_common.sh"
test_deadline 120
have_image || skip "no sandbox image (make image)"
# PyYAML reads the document: Debian's python3-yaml (scripts/setup-deps.sh test installs it).
py=""
for p in python3 /usr/bin/python3; do
    if "$p" -c 'import yaml' 2>/dev/null; then py=$p; break; fi
done
[ -n "$py" ] || fail "no python3 with PyYAML (apt-get install python3-yaml)"
start_api_server '"max_concurrent_runs": 1, "max_queued_runs_per_org": 1, "max_body_bytes": 1048576,
    "webhooks": {"allow_private_cidrs": ["127.0.0.1/32"]},
    "sandboxes": {"max_upload_bytes": 1048576, "max_live_per_org": 1}'
jq -n --arg s "$SLOW_PROMPT" --arg q "$QUICK_PROMPT" '{slow: $s, quick: $q}' >"$TEST_TMP/fixtures.json"
"$py" "$TOP/tests/blackbox/openapi_check.py" "$TOP/docs/openapi.yaml" "$EPHEMERAL_URL" \
    "$EPHEMERAL_API_KEY" "$DB" "$TEST_TMP/fixtures.json" || fail "the server does not match docs/openapi.yaml"
