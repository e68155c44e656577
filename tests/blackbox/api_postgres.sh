#!/bin/bash
# The API tests, unchanged, against PostgreSQL: every api_*.sh that does not read the SQLite
# file directly runs with its server on a fresh database of a PostgreSQL 15 started here
# (lib.sh's start_server honours EPH_TEST_PG).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/pg_common.sh"
pg_start
export EPH_TEST_PG=$PG_URL PG_BIN
ran=0
for t in "$TOP"/tests/blackbox/api_*.sh; do
    [ -x "$t" ] || continue
    grep -q -e sqlite3 -e "\$DB" "$t" && continue
    name=$(basename "$t" .sh)
    tmp=$(mktemp -d "$TEST_TMP/$name.XXXXXX")
    if TEST_TMP=$tmp "$t" >"$TEST_TMP/$name.log" 2>&1; then
        ran=$((ran + 1))
    else
        rc=$?
        [ $rc -eq 77 ] && { echo "$name: skipped: $(tail -n 1 "$TEST_TMP/$name.log")"; continue; }
        tail -n 30 "$TEST_TMP/$name.log" >&2
        fail "$name against PostgreSQL (exit $rc)"
    fi
done
[ $ran -gt 0 ] || skip "no API test could run"
echo "$ran API tests passed against PostgreSQL"
