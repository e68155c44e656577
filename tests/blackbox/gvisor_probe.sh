#!/bin/bash
# The gvisor backend's probe boots a sandbox once, then remembers it (a record of root's in
# /run/ephemeral/gvisor-probe/, one per runsc, init, library, image and boot) for later processes
# with the same ones: a second `sandbox run` boots no probe sandbox and leaves the record as it was
# (same inode), while a record anyone else could have written, or one for something else, is not
# believed: the probe boots again and writes a fresh one. Another build's record (another init)
# neither replaces this one nor is replaced by it.
. "$(dirname "$0")/gvisor_common.sh" # runs one sandbox (the probe) or skips

recdir=/run/ephemeral/gvisor-probe
init=$BUILD/ephemeral-init
real=$(command -v runsc)
# The record that names this runsc file ($1) and this build's init (the file as it is now: its
# device and inode, so that the record of an init built earlier at the same path is not taken for
# it) and image.
record_of() {
    local f
    for f in "$recdir"/*; do
        [ -f "$f" ] && grep -q "^$1 " "$f" && grep -q "^$init $(stat -c '%d %i' "$init") " "$f" &&
            grep -q "^$(readlink -f "$EPHEMERAL_IMAGE") " "$f" && echo "$f"
    done
}
rec=$(record_of "$real")
[ -n "$rec" ] && [ -f "$rec" ] || fail "no probe record after a sandbox booted"
[ "$(wc -l <<<"$rec")" -eq 1 ] || fail "more than one record for one key: $rec"

# Another build's record beside it: it is neither removed nor rewritten by this build's probes.
other=$recdir/00000000000000000000000000000000
printf 'runsc version 0\nboot x\n/elsewhere/ephemeral-init 1 2 3.0 4\n' >"$other"
trap 'rm -f "$other"; _cleanup' EXIT
assert_eq "$(stat -c '%u %a' "$rec")" "0 644" "the record's owner and mode"
assert_contains "$(head -n 1 "$rec")" "runsc version" "the record names runsc's version"
ino() { stat -c %i "$rec"; }

before=$(ino)
gv_run -- true
assert_eq "$GV_RC" 0 "a second sandbox"
assert_eq "$(ino)" "$before" "the record was kept (no probe sandbox booted)"

# Writable by others: not believed, the probe boots and replaces it.
chmod 0666 "$rec"
before=$(ino)
gv_run -- true
assert_eq "$GV_RC" 0 "a sandbox after the record was made writable"
[ "$(ino)" != "$before" ] || fail "a world-writable record was believed"
assert_eq "$(stat -c '%u %a' "$rec")" "0 644" "the new record's owner and mode"

# For another runsc file (a different key): not believed either.
real=$(command -v runsc)
sed -i "s|^$real \([0-9]*\) [0-9]* |$real \\1 1 |" "$rec"
grep -q "^$real [0-9]* 1 " "$rec" || fail "could not rewrite runsc's line in the record"
before=$(ino)
gv_run -- true
assert_eq "$GV_RC" 0 "a sandbox after the record was changed"
[ "$(ino)" != "$before" ] || fail "a record for another runsc file was believed"
assert_contains "$(head -n 1 "$rec")" "runsc version" "the rewritten record"
[ -f "$other" ] || fail "another build's record was removed"
assert_eq "$(head -n 1 "$other")" "runsc version 0" "another build's record, untouched"

# `runsc --version` (20 ms) runs at most once a process, and not at all once the record names
# the same runsc file: counted through a wrapper runsc (EPHEMERAL_RUNSC).
wrapdir=$(mktemp -d)
trap 'rm -rf "$wrapdir" "$other"; _cleanup' EXIT
printf '#!/bin/sh\nfor a in "$@"; do [ "$a" = --version ] && echo v >>%s/count; done\nexec %s "$@"\n' \
    "$wrapdir" "$real" >"$wrapdir/runsc"
chmod 0755 "$wrapdir/runsc"
export EPHEMERAL_RUNSC=$wrapdir/runsc
gv_run -- true
assert_eq "$GV_RC" 0 "a sandbox through the wrapper runsc (a new runsc file: probed)"
assert_eq "$(cat "$wrapdir/count" 2>/dev/null | wc -l)" 1 "version queries by the first process"
gv_run -- true
assert_eq "$GV_RC" 0 "a second sandbox through the wrapper runsc"
assert_eq "$(cat "$wrapdir/count" 2>/dev/null | wc -l)" 1 "version queries after a second process"
[ -n "$(record_of "$wrapdir/runsc")" ] || fail "no record for the wrapper runsc"
unset EPHEMERAL_RUNSC
# The real runsc's record is still there: the wrapper's did not replace it.
gv_run -- true
assert_eq "$GV_RC" 0 "a sandbox with the real runsc again"
assert_eq "$(record_of "$real")" "$rec" "the real runsc's record, kept beside the wrapper's"
echo ok
