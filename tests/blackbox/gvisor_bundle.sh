#!/bin/bash
# The gvisor backend's bundle: the guest files (the init, the compat library, ld.so.preload) are
# made once per build of the init and the library, in /run/ephemeral/gvisor/guest-<hash>/, and every
# later sandbox mounts the same copies without writing them again, whatever the image; a sandbox on
# another image runs on that image; another init gets guest files of its own and leaves the first
# ones in place; and what is a sandbox's own (its spec, runsc state, /tmp) never reaches another:
# the shared directory holds nothing of a run, the guest files cannot be written from inside, and
# a file one sandbox leaves in /tmp is not in the next one's.
. "$(dirname "$0")/gvisor_common.sh" # runs one sandbox (the probe) or skips

gvdir=/run/ephemeral/gvisor
init=$BUILD/ephemeral-init
# The shared directory made from the init $1 (its device and inode are in the key).
shared_of() {
    local d id
    id=$(stat -c '%d %i' "$1")
    for d in "$gvdir"/guest-*; do
        [ -f "$d/key" ] && grep -q "^init $id " "$d/key" && echo "$d"
    done
}
shared=$(shared_of "$init")
[ -n "$shared" ] || fail "no shared guest files after a sandbox booted"
[ "$(wc -l <<<"$shared")" -eq 1 ] || fail "more than one shared directory for one init: $shared"
assert_eq "$(stat -c '%u %a' "$shared")" "0 700" "the shared directory's owner and mode"
assert_eq "$(ls -A "$shared" | tr '\n' ' ')" "guest key ld.so.preload " "what the shared directory holds"
assert_eq "$(ls -A "$shared/guest" | tr '\n' ' ')" "ephemeral-gvisor-compat.so init " "the guest files"
cmp -s "$shared/guest/init" "$init" || fail "the shared init is not a copy of the build's"
cmp -s "$shared/guest/ephemeral-gvisor-compat.so" "$BUILD/ephemeral-gvisor-compat.so" ||
    fail "the shared compat library is not a copy of the build's"
# Inode and change time of each file: a rewrite, even of the same bytes, changes them (the
# directory's own times change on purpose: each process that takes it up marks it not idle).
files_id() {
    stat -c '%n %i' "$shared"
    stat -c '%n %i %z' "$shared"/key "$shared"/ld.so.preload "$shared"/guest/*
}
before=$(files_id)

# A second sandbox on the same image: the same copies, nothing written again. Inside, the guest
# files cannot be changed; a file is left in /tmp.
gv_run --json -- sh -c 'cat /etc/ld.so.preload; echo x 2>/dev/null >/.ephemeral/init && echo WROTE;
    echo x 2>/dev/null >/etc/ld.so.preload && echo WROTE; echo secret >/tmp/left-behind; pwd'
assert_eq "$GV_RC" 0 "a second sandbox"
out=$(jq -r .stdout <<<"$GV_OUT")
assert_eq "$(sed -n 1p <<<"$out")" "/.ephemeral/ephemeral-gvisor-compat.so" "the preload line"
assert_not_contains "$out" WROTE "a guest file written from inside"
first_dir=$(sed -n 2p <<<"$out")
assert_eq "$(files_id)" "$before" "the shared files after a second sandbox (not rewritten)"
cmp -s "$shared/guest/init" "$init" || fail "the shared init changed"

# The next sandbox: none of the last one's /tmp, a run directory of its own.
gv_run --json -- sh -c 'ls -A /tmp; cat /tmp/left-behind 2>/dev/null; pwd'
assert_eq "$GV_RC" 0 "a third sandbox"
out=$(jq -r .stdout <<<"$GV_OUT")
assert_not_contains "$out" "left-behind" "the last sandbox's /tmp file"
assert_not_contains "$out" "secret" "the last sandbox's /tmp file's bytes"
[ "$(tail -n 1 <<<"$out")" != "$first_dir" ] || fail "two sandboxes had the same run directory"
assert_eq "$(ls -A "$shared" | tr '\n' ' ')" "guest key ld.so.preload " "the shared directory after runs"
assert_eq "$(files_id)" "$before" "the shared files after a third sandbox"

# Another image (a hard-linked copy with one file more): the sandbox runs on it, with the same
# guest files; the first image's sandboxes do not see its file.
img2=$TEST_TMP/image2
# Hard links where /tmp is on the image's file system, a copy where it is not (a tmpfs /tmp).
cp -al "$(readlink -f "$EPHEMERAL_IMAGE")" "$img2" 2>/dev/null ||
    { rm -rf "$img2" && cp -a "$(readlink -f "$EPHEMERAL_IMAGE")" "$img2"; } ||
    fail "cannot copy the image"
echo "image two" >"$img2/which-image"
EPHEMERAL_IMAGE=$img2 gv_run -- cat /which-image
assert_eq "$GV_RC" 0 "a sandbox on another image"
assert_eq "$GV_OUT" "image two" "the other image's file, from inside"
assert_eq "$(files_id)" "$before" "the shared files after a sandbox on another image"
gv_run -- sh -c 'cat /which-image 2>&1 || echo absent'
assert_contains "$GV_OUT" "absent" "the other image's file in a sandbox on the first image"

# Another init (a copy: another inode): guest files of its own, the first ones kept as they were.
bin2=$TEST_TMP/bin2
mkdir -p "$bin2"
cp "$init" "$BUILD/ephemeral-gvisor-compat.so" "$bin2/"
EPHEMERAL_INIT=$bin2/ephemeral-init gv_run -- true
assert_eq "$GV_RC" 0 "a sandbox with another init"
shared2=$(shared_of "$bin2/ephemeral-init")
[ -n "$shared2" ] || fail "no shared guest files for the other init"
trap 'rm -rf "$shared2"; _cleanup' EXIT # its init is in TEST_TMP: no later process can use it
[ "$shared2" != "$shared" ] || fail "another init reused the first init's guest files"
cmp -s "$shared2/guest/init" "$bin2/ephemeral-init" || fail "the second shared init is not its copy"
assert_eq "$(files_id)" "$before" "the first init's shared files after another init's sandbox"
echo ok
