#!/bin/bash
# make faults: runs each fault point's driver with FAULT_FAIL_AT=1, 2, ... until it completes with
# no injected failure; for each N asserts no crash (exit 0 or 2, never a signal) and that an
# injected failure is reported as an error. tests/faults/run.sh OUT_DIR
set -eu
out=${1:-build/faults}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
cc -shared -fPIC -O1 -g -o "$out/inject.so" "$here/inject.c"
cc -O1 -g -o "$out/selftest" "$here/selftest.c"
points=0 failures=0
run_point() { # driver
    local n=1 rc
    points=$((points + 1))
    while :; do
        rc=0
        FAULT_FAIL_AT=$n LD_PRELOAD="$out/inject.so" "$@" 2>"$out/err" || rc=$?
        if ! grep -q '^fault: injected' "$out/err"; then
            [ $rc -eq 0 ] || { echo "FAIL $*: exit $rc with no injected failure"; failures=$((failures + 1)); }
            echo "ok   $*: $((n - 1)) allocation failures survived"
            return
        fi
        if [ $rc -ne 2 ] || ! grep -q '^error:' "$out/err"; then
            echo "FAIL $* at allocation $n: exit $rc"; failures=$((failures + 1))
        fi
        n=$((n + 1))
    done
}
run_point "$out/selftest"
echo "$points fault points, $failures failures"
[ $failures -eq 0 ]
