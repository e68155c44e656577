#!/bin/bash
# Runs the test suite: every unit test binary, then every black-box test script.
#
#   tests/run.sh [--unit-only|--blackbox-only] BUILD_DIR [PATTERN]
#
# A black-box test is an executable tests/blackbox/NAME.sh: exit 0 passes, 77 skips (with the
# reason on its last line of output), anything else fails. Each runs with a fresh temporary
# directory in $TEST_TMP and the build directory in $BUILD. The last line printed is the summary,
# "N passed, N failed, N skipped".
set -u
mode=all
case "${1:-}" in
--unit-only) mode=unit; shift ;;
--blackbox-only) mode=blackbox; shift ;;
esac
BUILD=$(cd "${1:-build}" && pwd)
pattern=${2:-}
top=$(cd "$(dirname "$0")/.." && pwd)
export BUILD TOP="$top"
passed=0 failed=0 skipped=0
failures=()
logdir=$BUILD/test-logs
mkdir -p "$logdir"

run_one() { # name, command...
    local name=$1; shift
    local log="$logdir/${name//\//_}.log"
    local start=$SECONDS
    "$@" >"$log" 2>&1
    local rc=$?
    local secs=$((SECONDS - start))
    if [ $rc -eq 0 ]; then
        passed=$((passed + 1)); printf 'PASS  %-48s %3ss\n' "$name" "$secs"
    elif [ $rc -eq 77 ]; then
        skipped=$((skipped + 1)); printf 'SKIP  %-48s %s\n' "$name" "$(tail -n 1 "$log")"
    else
        failed=$((failed + 1)); failures+=("$name")
        printf 'FAIL  %-48s %3ss (exit %d)\n' "$name" "$secs" "$rc"
        sed 's/^/    | /' "$log" | tail -n 40
    fi
}

if [ "$mode" != blackbox ]; then
    for t in "$BUILD"/tests/test_*; do
        [ -x "$t" ] || continue
        name=unit/$(basename "$t")
        [ -n "$pattern" ] && [[ $name != *$pattern* ]] && continue
        run_one "$name" "$t"
    done
fi
if [ "$mode" != unit ]; then
    for t in "$top"/tests/blackbox/*.sh; do
        [ -x "$t" ] || continue
        name=blackbox/$(basename "$t" .sh)
        [ -n "$pattern" ] && [[ $name != *$pattern* ]] && continue
        tmp=$(mktemp -d /tmp/ephemeral-test.XXXXXX)
        TEST_TMP=$tmp run_one "$name" "$t"
        rm -rf "$tmp"
    done
fi

echo
for f in "${failures[@]}"; do echo "failed: $f (log: $logdir/${f//\//_}.log)"; done
echo "$passed passed, $failed failed, $skipped skipped"
[ $failed -eq 0 ]
