#!/bin/bash
# scripts/check-function-length.sh, which `make lint` runs: a function of 121 lines fails and one
# of 120 passes; a label's block at column 0, braces inside strings, character literals and
# comments neither end a function early nor hide it; an attribute before the name does not
# become the name; a file of 1,201 lines fails; and the tree itself passes.
. "$(dirname "$0")/lib.sh"
check="$TOP/scripts/check-function-length.sh"

# A C file holding one function NAME of exactly LINES lines (head to closing brace), whose body
# is BODY followed by as many statements as it takes.
function_of() { # file name lines [body...]
    local file=$1 name=$2 lines=$3; shift 3
    {
        echo "static int other(void);"
        echo "int $name(int x)"
        echo "{"
        local n=3
        for l in "$@"; do echo "$l"; n=$((n + 1)); done
        while [ $n -lt "$lines" ]; do echo "    x++;"; n=$((n + 1)); done
        echo "}"
        echo
        echo "static int other(void)"
        echo "{"
        echo "    return 0;"
        echo "}"
    } > "$file"
}

function_of "$TEST_TMP/ok.c" fits 120
out=$("$check" "$TEST_TMP/ok.c" 2>&1) || fail "a function of 120 lines was refused: $out"

function_of "$TEST_TMP/long.c" too_long 121
out=$("$check" "$TEST_TMP/long.c" 2>&1) && fail "a function of 121 lines passed"
assert_contains "$out" "$TEST_TMP/long.c:too_long is 121 lines (at most 120)" "the long function"
assert_not_contains "$out" ":other " "the short function after it"

# clang-format puts a label's block at column 0: its "}" is not the function's end.
function_of "$TEST_TMP/label.c" with_label 121 "    if (x)" "        goto out;" "out: {" \
    "    x--;" "}"
out=$("$check" "$TEST_TMP/label.c" 2>&1) && fail "a function with a label's block passed"
assert_contains "$out" "label.c:with_label is 121 lines" "the function around a label's block"

# Braces in a string, a character literal or a comment count for nothing.
function_of "$TEST_TMP/literal.c" with_literals 121 '    const char *s = "{\"{";' \
    "    char c = '{';" "    /* { */ x += s[0] + c; // {" "    /*" "}" "     */"
out=$("$check" "$TEST_TMP/literal.c" 2>&1) && fail "a function with braces in literals passed"
assert_contains "$out" "literal.c:with_literals is 121 lines" "braces in literals and comments"
assert_not_contains "$out" ":other " "the function after the literals"

# The name after an attribute, not the attribute.
function_of "$TEST_TMP/attr.c" with_attr 121
sed -i 's/^int with_attr(int x)$/static void __attribute__((format(printf, 1, 0))) with_attr(int x)/' \
    "$TEST_TMP/attr.c"
out=$("$check" "$TEST_TMP/attr.c" 2>&1) && fail "a function with an attribute passed"
assert_contains "$out" "attr.c:with_attr is 121 lines" "the name after an attribute"

# A file of 1,201 lines fails, one of 1,200 passes.
for n in 1200 1201; do
    { for i in $(seq 100); do echo "static int f$i(void);"; done
      yes '/* a line */' | head -n $((n - 100)); } > "$TEST_TMP/file$n.c"
done
out=$("$check" "$TEST_TMP/file1200.c" 2>&1) || fail "a file of 1,200 lines was refused: $out"
out=$("$check" "$TEST_TMP/file1201.c" 2>&1) && fail "a file of 1,201 lines passed"
assert_contains "$out" "file1201.c is 1201 lines (at most 1200)" "the long file"

# What make lint checks: every function of src/, with the allow-list.
out=$("$check" 2>&1) || fail "the tree has a function over the limit: $out"
echo "function and file length: the limits, label blocks, literals, attributes, the tree"
