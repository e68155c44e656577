#!/bin/bash
# Images (docs/IMAGES.md) through the API and `ephemerald image`: a recipe with an extra Debian
# package, a file and a build-time command, built once in the cache outside the clone, its log
# streamed while it builds, and a replayed run whose command uses the package, then a replay of
# that run on the same image; a build that fails (a package that does not exist) says why and
# refuses runs while it builds (409 image_not_ready); unknown images (400 unknown_image, naming
# the images there are); bad recipes; a delete refused while a run holds the image (409); an OCI
# archive made here imported (layers in order, a whiteout, no device node, no set-id bit) and run
# on; a hostile archive ('..') refused with nothing written outside.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/api_common.sh"
test_deadline 500
have_image || skip "no sandbox image (make image)"
[ "$(id -u)" = 0 ] || skip "image builds run as root"
command -v mmdebstrap >/dev/null || skip "no mmdebstrap"
FIX=$TOP/tests/fixtures/images
cat >"$TEST_TMP/config.json" <<JSON
{"default_model": "openai/gpt-6-luna", "secret_key_file": "$TEST_TMP/secret.key",
 "shutdown_grace_seconds": 1,
 "images": {"build_timeout_seconds": 600, "max_size_mib": 2048, "max_concurrent_builds": 2},
 "models": [{"id": "openai/gpt-6-luna", "provider": "replay", "transcripts": "$FIX",
             "input_micros_per_mtok": 50000, "output_micros_per_mtok": 200000,
             "max_output_tokens": 256}]}
JSON
# IMAGES_SANDBOX=namespaces (gvisor, microvm) runs it on that backend; default: auto.
start_server --config "$TEST_TMP/config.json" ${IMAGES_SANDBOX:+--sandbox "$IMAGES_SANDBOX"}
post_image() { api POST /v1/images -H 'Content-Type: application/json' -d "$1"; }
run_on() { # PROMPT_DIR IMAGE [curl args]
    local dir=$1 image=$2
    shift 2
    api POST /v1/runs -H 'Content-Type: application/json' \
        -d "$(jq -c --arg i "$image" '. + {image: $i}' "$FIX/$dir/request.json")" "$@"
}

# --- bad input, nothing built ---
bad_image() { # body param-or-empty message-part
    local out; out=$(post_image "$1")
    assert_eq "$(code_of "$out")" 400 "bad recipe $1: $(body_of "$out")"
    assert_contains "$(body_of "$out" | jq -r .error.message)" "$3" "message of $1"
    [ -z "$2" ] || assert_eq "$(body_of "$out" | jq -r .error.param)" "$2" "param of $1"
}
bad_image '{"packages": ["jq"]}' name "needs a 'name'"
bad_image '{"name": "Tools"}' name "1 to 63"
bad_image '{"name": "-x"}' name "1 to 63"
bad_image "{\"name\": \"$(head -c 64 /dev/zero | tr '\0' a)\"}" name "1 to 63"
bad_image '{"name": "default"}' name "'default' is the default image"
bad_image '{"name": "x", "packages": ["jq; rm -rf /"]}' "" "is not a Debian package name"
bad_image '{"name": "x", "files": [{"path": "etc/x", "content": "a"}]}' "" "must be an absolute path"
bad_image '{"name": "x", "files": [{"path": "/etc/../../x", "content": "a"}]}' "" "'..'"
bad_image '{"name": "x", "files": [{"path": "/bin/x", "content": "a", "mode": 3565}]}' "" "no set-id"
bad_image '{"name": "x", "dockerfile": "FROM debian"}' "" "unknown field 'dockerfile'"
python3 -c 'import json; print(json.dumps({"name": "big", "files": [{"path": "/a", "content": "x" * (5 << 20)}]}))' >"$TEST_TMP/big.json"
out=$(api POST /v1/images -H 'Content-Type: application/json' -d @"$TEST_TMP/big.json")
assert_eq "$(code_of "$out")" 400 "too large a recipe"
assert_contains "$(body_of "$out")" "files total more than" "too large a recipe's message"
out=$(api GET /v1/images)
assert_eq "$(body_of "$out" | jq -c '[.data[].name]')" '[]' "nothing was defined by the bad inputs"

# Unknown image: 400 naming the images there are, nothing reserved.
before=$(api GET /v1/balance | sed '$d' | jq .reserved_micros)
out=$(run_on jq no-such-image)
assert_error "$out" 400 invalid_request_error image
assert_eq "$(body_of "$out" | jq -r .error.code)" unknown_image "unknown image code"
assert_contains "$(body_of "$out" | jq -r .error.message)" "the images there are: 'default'" "unknown image names the images"
assert_eq "$(api GET /v1/balance | sed '$d' | jq .reserved_micros)" "$before" "nothing reserved for an unknown image"

# --- a build that fails: refused runs while it builds, then the reason ---
out=$(post_image '{"name": "broken", "packages": ["no-such-package-ephemeral"]}')
assert_eq "$(code_of "$out")" 202 "broken image: $(body_of "$out")"
assert_eq "$(body_of "$out" | jq -r .status)" building "a new recipe builds"
out=$(run_on jq broken)
assert_eq "$(code_of "$out")" 409 "a run on an image that is building: $(body_of "$out")"
assert_eq "$(body_of "$out" | jq -r .error.code)" image_not_ready "not ready code"
assert_eq "$(api GET /v1/balance | sed '$d' | jq .reserved_micros)" "$before" "nothing reserved for an unready image"
# The log streams until the build ends (that is the wait).
log=$(curl -sS -N "$EPHEMERAL_URL/v1/images/broken/log" -H "Authorization: Bearer $EPHEMERAL_API_KEY")
assert_contains "$log" "Unable to locate package no-such-package-ephemeral" "the log says why"
out=$(api GET /v1/images/broken)
assert_eq "$(body_of "$out" | jq -r .status)" failed "a missing package fails the build"
assert_contains "$(body_of "$out" | jq -r .error)" "Unable to locate package no-such-package-ephemeral" "the image's error says why"
dir=/var/cache/ephemeral/images/$(body_of "$out" | jq -r .digest | cut -c8-23)
[ -n "${EPHEMERAL_CACHE_DIR:-}" ] && dir=$EPHEMERAL_CACHE_DIR/images/$(body_of "$out" | jq -r .digest | cut -c8-23)
[ ! -e "$dir/rootfs" ] && [ ! -e "$dir/rootfs.tmp" ] || fail "a failed build left a root in $dir"
assert_eq "$(code_of "$(run_on jq broken)")" 409 "a run on a failed image"

# --- the tools image: jq, a file, a build-time command ---
recipe='{"name": "tools", "packages": ["jq"],
  "files": [{"path": "/etc/image-note", "content": "note from the recipe\n"}],
  "run": ["jq --version > /etc/jq-version"]}'
out=$(post_image "$recipe")
assert_eq "$(code_of "$out")" 202 "tools image: $(body_of "$out")"
digest=$(body_of "$out" | jq -r .digest)
[[ $digest =~ ^sha256:[0-9a-f]{64}$ ]] || fail "digest $digest"
assert_eq "$(code_of "$(post_image "$recipe")")" 409 "the same name twice"
curl -sS -N "$EPHEMERAL_URL/v1/images/tools/log" -H "Authorization: Bearer $EPHEMERAL_API_KEY" >"$TEST_TMP/tools.log"
out=$(api GET /v1/images/tools)
assert_eq "$(body_of "$out" | jq -c '[.status, .packages, .error, .owner]')" '["ready",["jq"],null,"org"]' \
    "tools is ready: $(body_of "$out") $(tail -n 5 "$TEST_TMP/tools.log")"
[ "$(body_of "$out" | jq .size_bytes)" -gt 1000000 ] || fail "size $(body_of "$out" | jq .size_bytes)"
# The same recipe under another name: the cache answers, no build.
out=$(post_image "$(jq -c '.name = "tools-again"' <<<"$recipe")")
assert_eq "$(body_of "$out" | jq -c '[.status, .digest]')" "[\"ready\",\"$digest\"]" "the same recipe is built once"

out=$(run_on jq tools -H 'Prefer: wait=120')
assert_eq "$(code_of "$out")" 201 "run on tools: $(body_of "$out")"
b=$(body_of "$out")
assert_eq "$(jq -c '[.status, .result, .image, .sandbox.image, .sandbox.image_digest]' <<<"$b")" \
    "[\"completed\",\"sum 42\",\"tools\",\"tools\",\"$digest\"]" "a run on the image uses jq"
id=$(jq -r .id <<<"$b")
ev=$(api GET "/v1/runs/$id/events" | sed '$d' | jq -c '.data[] | select(.type == "sandbox.ready") | .data | [.image, .image_digest]')
assert_eq "$ev" "[\"tools\",\"$digest\"]" "sandbox.ready names the image and its digest"
out=$(api GET "/v1/runs/$id/events")
assert_contains "$(body_of "$out")" "note from the recipe" "the recipe's file is in the image"
# The default image has no jq: the same prompt there fails its command.
out=$(run_on jq default -H 'Prefer: wait=120')
assert_eq "$(body_of "$out" | jq -r .image)" default "a run without an image is on default"
assert_not_contains "$(body_of "$out" | jq -r .result)" "sum 42" "jq is not in the default image"
# A replay runs on its original's image.
out=$(api POST /v1/runs -H 'Content-Type: application/json' -H 'Prefer: wait=120' -d "{\"replay_of\": \"$id\", \"max_cost_micros\": 20000}")
assert_eq "$(body_of "$out" | jq -c '[.status, .result, .image, .sandbox.image_digest]')" \
    "[\"completed\",\"sum 42\",\"tools\",\"$digest\"]" "the replay: $(body_of "$out")"
out=$(api POST /v1/runs -H 'Content-Type: application/json' -d "{\"replay_of\": \"$id\", \"image\": \"default\", \"max_cost_micros\": 20000}")
assert_error "$out" 400 invalid_request_error image

# --- delete: refused while a run holds the image ---
out=$(run_on hold tools)
assert_eq "$(code_of "$out")" 201 "hold run"
hold=$(body_of "$out" | jq -r .id)
out=$(api DELETE /v1/images/tools)
assert_eq "$(code_of "$out")" 409 "delete while a run uses it: $(body_of "$out")"
assert_eq "$(body_of "$out" | jq -r .error.code)" image_in_use "in use code"
api POST "/v1/runs/$hold/cancel" -H 'Prefer: wait=60' >/dev/null
assert_eq "$(code_of "$(api DELETE /v1/images/tools)")" 200 "delete once the run ended"
assert_eq "$(code_of "$(api GET /v1/images/tools)")" 404 "deleted"
assert_eq "$(code_of "$(api DELETE /v1/images/tools)")" 404 "deleted twice"
assert_eq "$(code_of "$(run_on jq tools)")" 400 "a run on a deleted image"

# --- an OCI archive made here, imported by the operator ---
python3 "$TOP/tests/blackbox/make_oci.py" "$TEST_TMP/image.tar" "imported-$$" || fail "make_oci"
"$EPHD" image import imported "$TEST_TMP/image.tar" --db "$DB" >"$TEST_TMP/import.out" 2>&1 ||
    { cat "$TEST_TMP/import.out" >&2; fail "import"; }
out=$(api GET /v1/images/imported)
assert_eq "$(body_of "$out" | jq -c '[.status, .owner]')" '["ready","operator"]' "the operator's image, seen by the org"
idig=$(body_of "$out" | jq -r .digest)
assert_eq "$idig" "sha256:$(sha256sum "$TEST_TMP/image.tar" | cut -c1-64)" "an import's digest is its archive's"
root=${EPHEMERAL_CACHE_DIR:-/var/cache/ephemeral}/images/$(cut -c8-23 <<<"$idig")/rootfs
[ ! -e "$root/dev/evil-mem" ] || fail "a device node was imported"
[ ! -e "$root/etc/removed-by-whiteout" ] || fail "the whiteout was not applied"
assert_eq "$(stat -c %a "$root/usr/bin/setuid-tool")" 755 "set-id bits dropped"
assert_contains "$(cat "$root/etc/passwd")" "worker:x:1000:1000" "the worker user added"
out=$(run_on imported imported -H 'Prefer: wait=120')
assert_eq "$(body_of "$out" | jq -c '[.status, .result]')" "[\"completed\",\"marker imported-$$ whiteout-applied\"]" \
    "a run on the imported image: $(body_of "$out")"
assert_eq "$(code_of "$(api DELETE /v1/images/imported)")" 403 "an org cannot delete the operator's image"
"$EPHD" image list --db "$DB" 2>/dev/null | grep -q '^imported ' || fail "image list"

# A hostile archive: refused, nothing outside the root.
python3 "$TOP/tests/blackbox/make_oci.py" "$TEST_TMP/hostile.tar" "h-$$" hostile || fail "make_oci"
if "$EPHD" image import hostile "$TEST_TMP/hostile.tar" --db "$DB" >"$TEST_TMP/hostile.out" 2>&1; then
    fail "a hostile archive was imported"
fi
assert_contains "$(cat "$TEST_TMP/hostile.out")" "'..' component refused" "the refusal says why"
hdig=$(sha256sum "$TEST_TMP/hostile.tar" | cut -c1-16)
[ ! -e "${EPHEMERAL_CACHE_DIR:-/var/cache/ephemeral}/images/$hdig/escaped" ] || fail "an entry escaped"
[ ! -e "${EPHEMERAL_CACHE_DIR:-/var/cache/ephemeral}/images/$hdig/rootfs.tmp" ] || fail "a half-made root was left"
"$EPHD" image rm imported --db "$DB" 2>/dev/null || fail "image rm"
"$EPHD" image rm hostile --db "$DB" 2>/dev/null || fail "image rm hostile"
echo "images: built, cached, run, replayed, imported, refused"
