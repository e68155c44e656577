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

# For another runsc (a different key): not believed either.
sed -i '1s/.*/runsc version something-else/' "$rec"
before=$(ino)
gv_run -- true
assert_eq "$GV_RC" 0 "a sandbox after the record was changed"
[ "$(ino)" != "$before" ] || fail "a record for another runsc was believed"
assert_contains "$(head -n 1 "$rec")" "runsc version" "the rewritten record"
assert_not_contains "$(head -n 1 "$rec")" "something-else" "the rewritten record"
echo ok
