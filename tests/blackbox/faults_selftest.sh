#!/bin/bash
# The allocation-failure harness (tests/faults/) works: an injected failure is hit and reported
# as an error, and a crash planted on a failure path makes the harness fail.
set -u
out=${TEST_TMP:-$(mktemp -d)}/faults
log=$("$TOP/tests/faults/run.sh" "$out" 2>&1) || { echo "harness failed on the clean driver: $log"; exit 1; }
grep -q '2 allocation failures survived' <<<"$log" || { echo "no injected failure was hit: $log"; exit 1; }
if FAULT_PLANT_CRASH=1 "$TOP/tests/faults/run.sh" "$out" >"$out.crash" 2>&1; then
    echo "a planted crash was not caught"; cat "$out.crash"; exit 1
fi
grep -q '^FAIL .* at allocation 2: exit 134' "$out.crash" || { echo "wrong report:"; cat "$out.crash"; exit 1; }
echo "harness ok"
