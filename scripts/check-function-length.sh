#!/bin/sh
# The longest a function of src/ may be: from its first line to its closing brace, at most
# MAX_FUNCTION_LINES (120) lines, so that a long one is split into named steps (docs/HACKING.md).
# Run by `make lint`; prints each function over the limit and fails.
#
#   scripts/check-function-length.sh [FILE...]    (default: every src/*.c and src/*.h git knows)
#
# A definition starts at a line at column 0 with "(", not ending in ";", while no brace is open,
# and its body at the next "{" at column 0; it ends where the braces balance again, counted
# outside comments, strings and character literals (so a label's block "out: {" at column 0 is
# inside it). ALLOWED lists the functions still over the limit, to be split (each named with its
# file); one that is no longer over it must leave the list. A file of src/ is at most
# MAX_FILE_LINES (1,200) lines: a larger module is split by concern behind a private header.
set -eu
cd "$(dirname "$0")/.."
MAX=${MAX_FUNCTION_LINES:-120}
MAX_FILE=${MAX_FILE_LINES:-1200}
ALLOWED='
'
# shellcheck disable=SC2046
[ $# -gt 0 ] || set -- $(git ls-files 'src/*.c' 'src/*.h')
found=$(for f in "$@"; do
    awk -v f="$f" -v max="$MAX" '
        # The line without its comments, strings and character literals; in_c: inside /* */.
        function code(s,    out, i, c, n, q) {
            out = ""; n = length(s)
            for (i = 1; i <= n; i++) {
                c = substr(s, i, 1)
                if (in_c) {
                    if (c == "*" && substr(s, i + 1, 1) == "/") { in_c = 0; i++ }
                    continue
                }
                if (c == "/" && substr(s, i + 1, 1) == "*") { in_c = 1; i++; continue }
                if (c == "/" && substr(s, i + 1, 1) == "/") break
                if (c == "\"" || c == "\047") {
                    for (q = c; ++i <= n;) {
                        c = substr(s, i, 1)
                        if (c == "\\") i++
                        else if (c == q) break
                    }
                    continue
                }
                out = out c
            }
            return out
        }
        # The function name of a definition head: attributes dropped, the word before "(".
        function name_of(s,    i, d, n) {
            while ((i = index(s, "__attribute__")) > 0) {
                n = i + length("__attribute__")
                for (d = 0; n <= length(s); n++) {
                    if (substr(s, n, 1) == "(") d++
                    else if (substr(s, n, 1) == ")" && --d == 0) break
                }
                s = substr(s, 1, i - 1) substr(s, n + 1)
            }
            sub(/\(.*/, "", s); sub(/.*[ *]/, "", s)
            return s
        }
        {
            was_c = in_c
            line = code($0)
            if (!depth && !was_c) {
                if ($0 ~ /^[A-Za-z_].*\(/ && $0 !~ /;[[:space:]]*$/) { head = $0; start = NR }
                else if ($0 ~ /^\{/ && start) { open = start; name = head }
                else if ($0 !~ /^[[:space:]]/) start = 0
            }
            o = gsub(/\{/, "{", line); c = gsub(/\}/, "}", line)
            depth += o - c
            if (open && depth == 0 && (o || c)) {
                if (NR - open + 1 > max)
                    printf "%s:%s %d\n", f, name_of(name), NR - open + 1
                open = 0; start = 0
            }
        }
    ' "$f"
done)
status=0
for f in "$@"; do
    n=$(wc -l < "$f")
    [ "$n" -le "$MAX_FILE" ] ||
        { echo "$f is $n lines (at most $MAX_FILE): split it by concern" >&2; status=1; }
done
while read -r where lines; do
    [ -n "$where" ] || continue
    case $ALLOWED in *"
$where
"*) continue ;; esac
    echo "$where is $lines lines (at most $MAX): split it into named steps" >&2
    status=1
done <<EOF_FOUND
$found
EOF_FOUND
for where in $ALLOWED; do
    case " $* " in *" ${where%%:*} "*) ;; *) continue ;; esac
    echo "$found" | grep -q "^$where " ||
        { echo "$where is no longer over $MAX lines: remove it from ALLOWED" >&2; status=1; }
done
exit $status
