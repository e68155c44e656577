#!/bin/bash
# What a newcomer does, on a machine that has just been installed: a fresh Debian minbase root
# with only git and make added, a clone of this repository in it, and the README's commands run
# once each. Runs as root on a Debian host with mmdebstrap.
#
#   .ci/fresh-debian.sh ROOT_DIR [COMMAND...]     (default: time make demo && time make test)
#
# The root is made by mmdebstrap from this machine's own apt sources (no mirror is named here),
# then entered in a new mount namespace with pivot_root so that it is the root of its own mount
# tree, as on a real machine (a plain chroot cannot create the user namespaces the sandbox needs).
# /proc, /sys (with the cgroup hierarchies), /dev and a tmpfs /tmp are mounted inside; the PID
# namespace is the host's, so that the clean-up of dead servers' sandboxes sees every live owner.
# Each command's time is printed. The root is kept for inspection; remove it with rm -rf
# --one-file-system.
set -eu
root=${1:?usage: $0 ROOT_DIR [COMMAND...]}
shift
cmd=${*:-time make demo && time make test}
top=$(cd "$(dirname "$0")/.." && pwd)
[ "$(id -u)" -eq 0 ] || { echo "fresh-debian: run as root" >&2; exit 1; }

sources=()
[ -s /etc/apt/sources.list ] && sources+=(/etc/apt/sources.list)
for f in /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [ -e "$f" ] && sources+=("$f")
done
[ ${#sources[@]} -gt 0 ] || { echo "fresh-debian: this machine has no apt sources" >&2; exit 1; }
. /etc/os-release

if [ ! -e "$root/etc/debian_version" ]; then
    echo "fresh-debian: making a $VERSION_CODENAME minbase root in $root" >&2
    mmdebstrap --variant=minbase --include=git,make,ca-certificates --quiet \
        "$VERSION_CODENAME" "$root" "${sources[@]}"
fi
rm -rf "$root/root/ephemeral"
git clone --quiet "$top" "$root/root/ephemeral"

# shellcheck disable=SC2016
exec unshare --mount --propagation private /bin/bash -c '
set -eu
root=$1 cmd=$2
mount --bind "$root" "$root"
mount -t proc proc "$root/proc"
mount --rbind /sys "$root/sys"
mount --rbind /dev "$root/dev"
mount -t tmpfs -o mode=1777 tmpfs "$root/tmp"
cp /etc/resolv.conf "$root/etc/resolv.conf"
mkdir -p "$root/.old-root"
cd "$root"
pivot_root . .old-root
umount -l /.old-root
rmdir /.old-root
cd /root/ephemeral
export HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8
export TIMEFORMAT="fresh-debian: %0R s"
/bin/bash -c "$cmd"
' fresh-debian "$root" "$cmd"
