#!/bin/bash
# The gvisor backend's probe boots a sandbox once, then remembers it (/run/ephemeral/gvisor-probe-ok,
# root's) for later processes on the same boot with the same runsc, init, library and image: a
# second `sandbox run` boots no probe sandbox and leaves the record as it was (same inode), while
# a record anyone else could have written, or one for something else, is not believed: the probe
# boots again and writes a fresh one.
. "$(dirname "$0")/gvisor_common.sh" # runs one sandbox (the probe) or skips

rec=/run/ephemeral/gvisor-probe-ok
[ -f "$rec" ] || fail "no probe record after a sandbox booted"
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

# `runsc --version` (20 ms) runs at most once a process, and not at all once the record names
# the same runsc file: counted through a wrapper runsc (EPHEMERAL_RUNSC).
wrapdir=$(mktemp -d)
trap 'rm -rf "$wrapdir"' EXIT
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
unset EPHEMERAL_RUNSC
echo ok
