#!/bin/bash
# `make install` (docs/DEPLOY.md): staged under DESTDIR, every file lands under the prefix it was
# given and nothing outside it; installed for real into a prefix of the test's own, the installed
# server, with the installed configuration and nothing of the source tree, serves the seed example;
# a second install keeps the operator's configuration. The Containerfile is well formed.
. "$(dirname "$0")/lib.sh"
cd "$TOP" || fail "no TOP"
[ -e "$EPHEMERAL_IMAGE/bin/sh" ] || skip "no sandbox image (make image)"

# Staged: DESTDIR=stage PREFIX=/usr puts every file under stage, at its /usr or /etc path.
stage=$TEST_TMP/stage
make -s install BUILD="$BUILD" DESTDIR="$stage" PREFIX=/usr >"$TEST_TMP/stage.log" 2>&1 ||
    fail "make install DESTDIR: $(tail -n 20 "$TEST_TMP/stage.log")"
for f in usr/bin/ephemerald usr/bin/ephemeral usr/bin/ephemeral-sandbox \
    usr/lib/ephemeral/ephemeral-init usr/lib/ephemeral/ephemeral-gvisor-compat.so \
    usr/share/man/man1/ephemeral.1 usr/share/man/man8/ephemerald.8 \
    usr/share/ephemeral/examples/sandbox-proof/request.json \
    usr/share/ephemeral/examples/sandbox-proof/transcript.jsonl \
    usr/share/ephemeral/ephemerald.example.json etc/ephemeral/ephemerald.json \
    usr/lib/systemd/system/ephemerald.service usr/share/bash-completion/completions/ephemeral \
    usr/share/bash-completion/completions/ephemerald; do
    [ -f "$stage/$f" ] || fail "make install did not install /$f"
done
[ -x "$stage/usr/bin/ephemerald" ] || fail "ephemerald is not executable"
outside=$(cd "$stage" && find . -type f | grep -v -e '^\./usr/' -e '^\./etc/ephemeral/')
assert_eq "$outside" "" "files outside the prefix and the configuration directory"
unit=$(cat "$stage/usr/lib/systemd/system/ephemerald.service")
assert_contains "$unit" "ExecStart=/usr/bin/ephemerald serve --config /etc/ephemeral/ephemerald.json" \
    "the unit runs the installed program"
conf=$stage/etc/ephemeral/ephemerald.json
jq -e . "$conf" >/dev/null || fail "the installed configuration is not JSON"
assert_eq "$(jq -r '.models[0].transcripts' "$conf")" /usr/share/ephemeral/examples \
    "the replay model reads the installed examples"
assert_eq "$(jq -r '.sandbox.init_path // "none"' "$conf")" none "no build path in the configuration"

# For real, into a prefix of the test's own; then the installed server alone, from a directory
# that holds nothing of the source tree, serves the seed example.
prefix=$TEST_TMP/prefix
make -s install BUILD="$BUILD" PREFIX="$prefix" SYSCONFDIR="$prefix/etc" >"$TEST_TMP/real.log" 2>&1 ||
    fail "make install PREFIX: $(tail -n 20 "$TEST_TMP/real.log")"
cp "$prefix/etc/ephemeral/ephemerald.json" "$TEST_TMP/installed.json"
state=$TEST_TMP/state
mkdir -p "$state"
port=$(free_port)
jq --arg l "127.0.0.1:$port" --arg i "$EPHEMERAL_IMAGE" '.listen = $l | .sandbox.image = $i' \
    "$TEST_TMP/installed.json" >"$prefix/etc/ephemeral/ephemerald.json"
cd "$state" || fail "no state directory"
key=$(env -u EPHEMERAL_IMAGE "$prefix/bin/ephemerald" admin init \
    --config "$prefix/etc/ephemeral/ephemerald.json") || fail "installed admin init"
env -u EPHEMERAL_IMAGE "$prefix/bin/ephemerald" serve --config "$prefix/etc/ephemeral/ephemerald.json" \
    >"$TEST_TMP/installed-server.log" 2>&1 &
_pids+=("$!")
for _ in $(seq 300); do curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break; sleep 0.05; done
curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null || fail "the installed server is not healthy: $(tail -n 20 "$TEST_TMP/installed-server.log")"
grep -q "ephemeral-init" <(ls "$prefix/lib/ephemeral") || fail "no installed guest agent"
run=$(EPHEMERAL_URL="http://127.0.0.1:$port" EPHEMERAL_API_KEY=$key \
    "$prefix/bin/ephemeral" run "$prefix/share/ephemeral/examples/sandbox-proof/request.json" --json) ||
    fail "the seed example on the installed server: $(tail -n 20 "$TEST_TMP/installed-server.log")"
assert_eq "$(jq -r .status <<<"$run")" completed "the seed example on the installed server"
assert_contains "$(jq -r .result <<<"$run")" "2 3 5 7 11 13" "the seed's primes"
assert_eq "$(jq '.cost.charged_micros + .cost.released_micros' <<<"$run")" 40000 "its money"
[ -e "$state/var/ephemeral.db" ] || fail "the store is not under the working directory"
cd "$TOP" || fail "no TOP"

# A second install keeps the operator's configuration.
cp "$prefix/etc/ephemeral/ephemerald.json" "$TEST_TMP/before.json"
make -s install BUILD="$BUILD" PREFIX="$prefix" SYSCONFDIR="$prefix/etc" >"$TEST_TMP/again.log" 2>&1 ||
    fail "make install again"
cmp -s "$TEST_TMP/before.json" "$prefix/etc/ephemeral/ephemerald.json" ||
    fail "a second install overwrote the configuration"
assert_contains "$(cat "$TEST_TMP/again.log")" "exists: kept as it is" "the second install says so"

# The bash completion, as installed: the flags come from the programs' own --help.
complete_words() { # program words... (the last one is being completed)
    bash -c '. "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); PATH=$BIN:$PATH
        _${COMP_WORDS[0]}; printf "%s\n" "${COMPREPLY[@]}"' _ \
        "$prefix/share/bash-completion/completions/ephemeral" "$@"
}
export BIN=$prefix/bin
assert_eq "$(complete_words ephemeral ru)" run "a command"
assert_eq "$(complete_words ephemeral run --me)" --metadata "a flag of run"
assert_eq "$(complete_words ephemeral list --af)" --after "a flag of list"
assert_eq "$(complete_words ephemeral list --status fa)" failed "a status"
assert_eq "$(complete_words ephemerald admin key cr)" create "a subcommand"
assert_eq "$(complete_words ephemerald admin init --cre)" --credit-micros "a flag of admin init"
assert_contains "$(complete_words ephemerald serve --)" "--max-concurrent-runs" "the flags of serve"
assert_eq "$(complete_words ephemerald sandbox run --back)" --backend "a flag of sandbox run"

# The Containerfile: every instruction is one the format has, it starts FROM a Debian base, and
# the packages it installs are the project's own list.
cf=dist/Containerfile
[ -f "$cf" ] || fail "no $cf"
bad=$(sed -e ':a' -e '/\\$/N; s/\\\n//; ta' "$cf" | grep -v -e '^[[:space:]]*#' -e '^[[:space:]]*$' |
    grep -v -E '^(FROM|RUN|COPY|ARG|ENV|WORKDIR|EXPOSE|VOLUME|USER|ENTRYPOINT|CMD|LABEL|STOPSIGNAL|HEALTHCHECK) ')
assert_eq "$bad" "" "lines of the Containerfile that are no instruction"
assert_contains "$(grep '^FROM' "$cf" | head -n 1)" "debian:12" "the base"
assert_contains "$(cat "$cf")" "scripts/setup-deps.sh" "the packages come from the project's list"
echo ok
