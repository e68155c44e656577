#!/bin/bash
# A sanitizer's report in a log of a test's folder fails that test at its exit, whatever the test
# asserted (lib.sh's cleanup): an AddressSanitizer error, a leak, undefined behaviour. Checked with
# a child test that passes and leaves such a log, and one that leaves a clean log.
. "$(dirname "$0")/lib.sh"

# Each child's folder is apart from this test's, which must stay clean for its own check.
children=$(mktemp -d /tmp/ephemeral-sanitizer.XXXXXX)
trap 'rm -rf "$children"; _cleanup' EXIT
here=$(cd "$(dirname "$0")" && pwd)

child() { # LOG-LINE: runs a test that passes, with that line in its server's log; sets $status, $out
    local dir
    dir=$(mktemp -d "$children/child.XXXXXX")
    printf 'serve: listening\n%s\n' "$1" >"$dir/server.log"
    out=$(BUILD=$BUILD TOP=$TOP TEST_TMP=$dir bash -c '. "$1/lib.sh"; exit 0' _ "$here" 2>&1)
    status=$?
}

child 'serve: stopped'
assert_eq "$status" 0 "a clean log"
child '==123==ERROR: LeakSanitizer: detected memory leaks'
assert_eq "$status" 1 "a leak"
child '==123==ERROR: AddressSanitizer: heap-use-after-free on address 0x1'
assert_eq "$status" 1 "a use after free"
child 'src/api/runs.c:10:5: runtime error: signed integer overflow'
assert_eq "$status" 1 "undefined behaviour"
# The report is shown, so that the failure says what was found.
assert_contains "$out" "runtime error: signed integer overflow" "the report shown"
echo "sanitizer reports ok"
