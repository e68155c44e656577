#!/bin/bash
# Runs the test suite: every unit test binary, then every black-box test script.
#
#   tests/run.sh [--unit-only|--blackbox-only] BUILD_DIR [PATTERN]
#
# A black-box test is an executable tests/blackbox/NAME.sh: exit 0 passes, 77 skips (with the
# reason on its last line of output), anything else fails. A test file without its run bit fails
# (it would otherwise never run, unnoticed); lib.sh and NAME_common.sh are libraries the tests
# source, not tests. A unit test binary that skipped some of its tests
# (cmocka's skip()) passes, and the summary says how many it skipped. Each runs with a fresh temporary
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
        passed=$((passed + 1))
        local inner
        inner=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test(s).*/\1/p' "$log" | head -n 1)
        if [ -n "$inner" ]; then
            printf 'PASS  %-48s %3ss (%d skipped: %s)\n' "$name" "$secs" "$inner" \
                "$(sed -n 's/^skipped: //p' "$log" | head -n 1 | cut -c1-70)"
        else
            printf 'PASS  %-48s %3ss\n' "$name" "$secs"
        fi
    elif [ $rc -eq 77 ]; then
        skipped=$((skipped + 1)); printf 'SKIP  %-48s %s\n' "$name" "$(tail -n 1 "$log")"
    else
        failed=$((failed + 1)); failures+=("$name")
        printf 'FAIL  %-48s %3ss (exit %d)\n' "$name" "$secs" "$rc"
        sed 's/^/    | /' "$log" | tail -n 40
    fi
}

# A test that cannot run because its file lost its run bit is a failure, not a silent omission.
not_executable() { # name, path
    echo "$2 is not executable: chmod +x it (git update-index --chmod=+x)"
    return 126
}

if [ "$mode" != blackbox ]; then
    for t in "$BUILD"/tests/test_*; do
        [ -f "$t" ] || continue
        name=unit/$(basename "$t")
        [ -n "$pattern" ] && [[ $name != *$pattern* ]] && continue
        if [ -x "$t" ]; then run_one "$name" "$t"; else run_one "$name" not_executable "$name" "$t"; fi
    done
fi
if [ "$mode" != unit ]; then
    for t in "$top"/tests/blackbox/*.sh; do
        case $(basename "$t") in lib.sh | *_common.sh) continue ;; esac # sourced, not run
        name=blackbox/$(basename "$t" .sh)
        [ -n "$pattern" ] && [[ $name != *$pattern* ]] && continue
        if [ ! -x "$t" ]; then
            run_one "$name" not_executable "$name" "$t"
            continue
        fi
        tmp=$(mktemp -d /tmp/ephemeral-test.XXXXXX)
        TEST_TMP=$tmp run_one "$name" "$t"
        rm -rf "$tmp"
    done
fi

echo
for f in "${failures[@]}"; do echo "failed: $f (log: $logdir/${f//\//_}.log)"; done
echo "$passed passed, $failed failed, $skipped skipped"
[ $failed -eq 0 ]
