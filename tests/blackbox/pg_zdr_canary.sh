#!/bin/bash
# Zero data retention on PostgreSQL (docs/API.md, docs/SECURITY.md): the whole of zdr_canary with its store on a
# PostgreSQL 15 of its own, whose whole data directory (pg_wal included) is searched. Skips where
# the PostgreSQL server binaries are missing.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/pg_common.sh"
pg_bindir >/dev/null || skip "PostgreSQL server binaries not installed (scripts/setup-deps.sh test)"
ZDR_CANARY_STORE=postgres exec "$(dirname "$0")/zdr_canary.sh"
