#!/bin/bash
# The allocation-failure harness (tests/faults/) works: built as make faults builds the unit tests
# (the code under test through ld -r --wrap, the sanitizers), it fails each of the sample's two
# calls and finds them reported; a crash, a leak and a hang planted on a failure path are problems
# that fail the run, named with the call that found them.
set -u
out=${TEST_TMP:-$(mktemp -d)}/faults
mkdir -p "$out"
# shellcheck disable=SC2054 # the comma belongs to the option
san=(-fsanitize=address,undefined -fno-omit-frame-pointer -g -O1)
wrap=$(sed -n '/^FAULT_WRAPPED :=/,/[^\\]$/p' "$TOP/Makefile" | sed 's/^FAULT_WRAPPED :=//; s/\\//g' | tr -s ' \n' ' ')
[ -n "$wrap" ] || { echo "FAULT_WRAPPED not found in the Makefile"; exit 1; }
cc "${san[@]}" -c -o "$out/sample.o" "$TOP/tests/faults/sample.c" || exit 1
read -ra names <<<"$wrap"
ld -r "${names[@]/#/--wrap=}" -o "$out/code.o" "$out/sample.o" || exit 1
cc "${san[@]}" -D_GNU_SOURCE -o "$out/selftest" "$TOP/tests/faults/selftest.c" "$TOP/tests/faults/fault.c" \
    "$out/code.o" -Wl,--wrap=_cmocka_run_group_tests,--wrap=_skip -ljansson -lcurl -lcmocka -ldl -lpthread ||
    exit 1
export FAULTS=1 ASAN_OPTIONS=abort_on_error=1:detect_leaks=1:handle_abort=0
"$out/selftest" >"$out/clean" 2>&1 || { echo "the clean sample fails:"; cat "$out/clean"; exit 1; }
grep -q 'test_pair: 2 calls, 2 failure points' "$out/clean" || { echo "not both calls failed:"; cat "$out/clean"; exit 1; }
grep -q '2 failure points injected (0 absorbed, 2 reported; 0 tests sampled), 0 problems' "$out/clean" ||
    { echo "wrong summary:"; cat "$out/clean"; exit 1; }
for plant in crash leak hang; do
    if FAULT_PLANT=$plant FAULT_TIMEOUT=1 "$out/selftest" >"$out/$plant" 2>&1; then
        echo "a planted $plant was not caught:"; cat "$out/$plant"; exit 1
    fi
    case $plant in crash) want='call 2 of 2 failed: crashed' ;; leak) want='call 2 of 2 failed: leaked' ;;
        hang) want='call 2 of 2 failed: hung' ;; esac
    grep -q "^FAULT selftest/test_pair: $want" "$out/$plant" || { echo "wrong report for $plant:"; cat "$out/$plant"; exit 1; }
    grep -q 'sample_pair.*sample.c' "$out/$plant" || { echo "the failing call's stack is not shown:"; cat "$out/$plant"; exit 1; }
done
echo "harness ok"
