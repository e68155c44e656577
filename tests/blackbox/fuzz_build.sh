#!/bin/bash
# `make fuzz` builds every driver in tests/fuzz/ and runs each one (for two seconds here) from its
# seed corpus: a driver that no longer builds (a source the server's library gained, a header
# folder missing) or that finds a crash at once fails this test, on a fresh clone as here.
. "$(dirname "$0")/lib.sh"
command -v clang >/dev/null || skip "clang is not installed (scripts/setup-deps.sh test installs it)"

out=$(make --no-print-directory -C "$TOP" fuzz BUILD="$BUILD" FUZZ_SECONDS=2 2>&1)
rc=$?
printf '%s\n' "$out" | tail -n 40
assert_eq "$rc" 0 "make fuzz"
for drv in "$TOP"/tests/fuzz/fuzz_*.c; do
    name=$(basename "$drv" .c)
    assert_contains "$out" "fuzz: $name ok" "$name built and ran"
    # Every driver has seeds to start from (tests/fuzz/corpus/NAME), so it reaches past the
    # parsers' first refusals.
    [ -n "$(ls -A "$TOP/tests/fuzz/corpus/$name" 2>/dev/null)" ] || fail "$name has no seed corpus"
    units=$(grep -E '^stat::number_of_executed_units' "$BUILD/fuzz/$name.log" | awk '{print $2}')
    [ "${units:-0}" -gt 0 ] || fail "$name executed no input"
done
echo "fuzz drivers: $(ls "$TOP"/tests/fuzz/fuzz_*.c | wc -l) built and ran"
