#!/bin/bash
# The microvm backend runs a custom image (docs/IMAGES.md): the recipe images.sh builds (jq, a
# file, a build-time command; cached outside the clone, so built once) made by
# `ephemerald image create`, and one microVM (software emulation) booted from the disk made from
# that image's tree, whose command uses jq and reads the recipe's file.
. "$(dirname "$0")/microvm_common.sh"
command -v mmdebstrap >/dev/null || skip "no mmdebstrap"
printf 'note from the recipe\n' >"$TEST_TMP/note"
"$EPHD" image create vm-tools --packages jq --file "/etc/image-note=$TEST_TMP/note" \
    --run 'jq --version > /etc/jq-version' --db "$TEST_TMP/db.sqlite" >"$TEST_TMP/create.out" 2>"$TEST_TMP/create.err" ||
    { tail -n 20 "$TEST_TMP/create.err" >&2; fail "image create"; }
digest=$(awk '$1 == "vm-tools" && $2 == "ready" {print $NF}' "$TEST_TMP/create.out")
[[ $digest =~ ^sha256:[0-9a-f]{64}$ ]] || fail "no ready image: $(cat "$TEST_TMP/create.out")"
root=${EPHEMERAL_CACHE_DIR:-/var/cache/ephemeral}/images/${digest:7:16}/rootfs
[ -f "$(dirname "$root")/microvm/complete" ] || skip "the image has no microvm disk (its kernel could not be fetched)"
out=$(timeout "$VM_TIMEOUT" "$EPHD" sandbox run --backend microvm --image "$root" --timeout 120 -- \
    /bin/sh -c 'jq -n "[1,2,39] | add"; cat /etc/image-note; id -un' 2>"$TEST_TMP/vm.err") ||
    { tail -n 20 "$TEST_TMP/vm.err" >&2; fail "the microVM did not run the image"; }
assert_eq "$out" "$(printf '42\nnote from the recipe\nworker')" "the image's programs and files in the microVM"
"$EPHD" image rm vm-tools --db "$TEST_TMP/db.sqlite" 2>/dev/null || fail "image rm"
echo "microvm: a custom image booted from its own disk"
