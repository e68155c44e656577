#!/bin/bash
# The command runs as worker (uid/gid 1000, no other groups) in /tmp/ephemeral-run-XXXXXX/scratch,
# with the clean environment (HOME, PATH, LANG=C.UTF-8, TMPDIR, and --env), none of the caller's,
# hostname "sandbox"; the exit status and 128+signal come back; output is streamed to the right
# streams.
. "$(dirname "$0")/sandbox_common.sh"

export EPH_TEST_SECRET=host-secret-value
sb_run --env EXTRA=given -- sh -c 'whoami; id -u; id -g; id -G; pwd; echo "HOME=$HOME"; env | sort; hostname'
assert_eq "$SB_RC" 0 "exit status"
lines=$(printf '%s\n' "$SB_OUT")
assert_eq "$(sed -n 1p <<<"$lines")" worker "whoami"
assert_eq "$(sed -n 2p <<<"$lines")" 1000 "uid"
assert_eq "$(sed -n 3p <<<"$lines")" 1000 "gid"
assert_eq "$(sed -n 4p <<<"$lines")" 1000 "supplementary groups"
scratch=$(sed -n 5p <<<"$lines")
[[ $scratch =~ ^/tmp/ephemeral-run-[A-Za-z0-9]{6}/scratch$ ]] || fail "pwd is '$scratch'"
assert_contains "$SB_OUT" "LANG=C.UTF-8" "LANG"
assert_contains "$SB_OUT" "TMPDIR=/tmp" "TMPDIR"
assert_contains "$SB_OUT" "EXTRA=given" "--env"
assert_contains "$SB_OUT" "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" "PATH"
assert_not_contains "$SB_OUT" "host-secret-value" "the caller's environment"
assert_eq "$(tail -n 1 <<<"$lines")" sandbox "hostname"
home=$(grep '^HOME=' <<<"$lines" | head -n 1)
[[ $home =~ ^HOME=/tmp/ephemeral-run-[A-Za-z0-9]{6}/home$ ]] || fail "HOME is '$home'"

# Status, signals and the two streams.
sb_run -- sh -c 'echo to-out; echo to-err >&2; exit 7'
assert_eq "$SB_RC" 7 "exit status 7"
assert_eq "$SB_OUT" "to-out" "stdout"
assert_eq "$SB_ERR" "to-err" "stderr"
sb_run -- sh -c 'kill -TERM $$'
assert_eq "$SB_RC" $((128 + 15)) "status of a command killed by SIGTERM"

# --json reports the same, with timings.
sb_run --json -- sh -c 'printf abc; exit 3'
assert_eq "$SB_RC" 3 "exit status with --json"
assert_eq "$(jq -r .exit_code <<<"$SB_OUT")" 3 "json exit_code"
assert_eq "$(jq -r .stdout <<<"$SB_OUT")" abc "json stdout"
assert_eq "$(jq -r .stdout_total <<<"$SB_OUT")" 3 "json stdout_total"
assert_eq "$(jq -r '.create_ms > 0 and .exec_ms > 0 and .destroy_ms > 0' <<<"$SB_OUT")" true "json timings"
assert_eq "$(jq -r .backend <<<"$SB_OUT")" namespaces "json backend"

# Arguments are quoted, not re-split or expanded.
sb_run -- printf '%s|' 'a b' '$HOME' "it's"
assert_eq "$SB_OUT" 'a b|$HOME|it'"'"'s|' "argument quoting"
echo ok
