#!/bin/sh
# The longest a function of src/ may be: from its first line to its closing brace, at most
# MAX_FUNCTION_LINES (120) lines, so that a long one is split into named steps (docs/HACKING.md).
# Run by `make lint`; prints each function over the limit and fails. A definition is a line at
# column 0 with "(", not ending in ";", followed by "{" at column 0; it ends at the first "}" at
# column 0. ALLOWED lists the functions still over the limit, to be split (each named with its
# file); one that is no longer over it must leave the list.
set -eu
cd "$(dirname "$0")/.."
MAX=${MAX_FUNCTION_LINES:-120}
ALLOWED='
src/cli/request.c:eph_cli_run_parse
src/cli/runs.c:print_run
'
found=$(git ls-files 'src/*.c' | while read -r f; do
    awk -v f="$f" -v max="$MAX" '
        /^[A-Za-z_].*\(/ && !/;[[:space:]]*$/ { head = $0; start = NR; next }
        /^\{/ && start { open = start; name = head; start = 0; next }
        /^\}/ && open {
            if (NR - open + 1 > max) {
                sub(/\(.*/, "", name); sub(/.*[ *]/, "", name)
                printf "%s:%s %d\n", f, name, NR - open + 1
            }
            open = 0
        }
    ' "$f"
done)
status=0
echo "$found" | while read -r where lines; do
    [ -n "$where" ] || continue
    case $ALLOWED in *"
$where
"*) continue ;; esac
    echo "$where is $lines lines (at most $MAX): split it into named steps" >&2
    echo x
done | grep -q x && status=1
for where in $ALLOWED; do
    echo "$found" | grep -q "^$where " ||
        { echo "$where is no longer over $MAX lines: remove it from ALLOWED" >&2; status=1; }
done
exit $status
