#!/bin/bash
# make faults: runs every unit test binary of BUILD_DIR (built with FAULTS=1, tests/faults/fault.c)
# with FAULTS=1, two at a time: each test with its Nth call failed, N = 1, 2, ... until it
# completes. Prints each binary's summary and problems, then the totals; fails when a binary
# reports a problem or does not finish.
#   tests/faults/run.sh BUILD_DIR [PATTERN]
set -u
build=$1 pattern=${2:-}
logs=$build/fault-logs
mkdir -p "$logs"
export FAULTS=1
# A sanitizer report ends the child with a signal the harness sees; leaks are checked by the
# harness when the body ends (with the test's stack still there), not at the child's exit.
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:handle_abort=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:abort_on_error=1}

one() { # binary
    local name log rc
    name=$(basename "$1")
    log=$logs/$name.log
    "$1" >"$log" 2>&1
    rc=$?
    grep -h '^faults: [^/]*: ' "$log" # the binary's summary line, named after it
    if [ $rc -ne 0 ]; then
        echo "FAIL $name (exit $rc):"
        grep -A120 '^FAULT ' "$log" | head -n 400
        grep -q '^faults: [^/]*: ' "$log" || tail -n 40 "$log"
    fi
    return $rc
}
export -f one
export logs

bins=()
for t in "$build"/tests/test_*; do
    [ -x "$t" ] || continue
    [ -n "$pattern" ] && [[ $(basename "$t") != *$pattern* ]] && continue
    bins+=("$t")
done
[ ${#bins[@]} -gt 0 ] || { echo "no unit test binary in $build/tests"; exit 1; }
# shellcheck disable=SC2016 # $1 is the inner shell's
printf '%s\n' "${bins[@]}" | xargs -P 2 -I{} bash -c 'one "$1"' _ {} | tee "$logs/summary"
failed=$(grep -c '^FAIL ' "$logs/summary")
sum() { sed -n "$1" "$logs/summary" | awk '{ n += $1 } END { print n + 0 }'; }
points=$(sum 's/.* tests, \([0-9]*\) failure points injected.*/\1/p')
problems=$(sum 's/.* \([0-9]*\) problems$/\1/p')
echo "faults: ${#bins[@]} binaries, ${points:-0} failure points injected, ${problems:-0} problems, $failed binaries failed"
[ "$failed" -eq 0 ]
