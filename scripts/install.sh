#!/bin/sh
# Installs Ephemeral (what `make install` runs; docs/DEPLOY.md):
#   install.sh BUILD DESTDIR BINDIR LIBEXECDIR DATADIR MANDIR SYSCONFDIR UNITDIR COMPLETIONDIR
# Every path but BUILD is where the file will live; DESTDIR (may be empty) is prefixed to each for
# staging. The configuration is written only when none is there: an operator's file is never
# overwritten.
set -eu
[ $# -eq 9 ] || {
    echo "usage: $0 BUILD DESTDIR BINDIR LIBEXECDIR DATADIR MANDIR SYSCONFDIR UNITDIR COMPLETIONDIR" >&2
    exit 2
}
build=$1 dest=$2 bindir=$3 libexecdir=$4 datadir=$5 mandir=$6 sysconfdir=$7 unitdir=$8 compdir=$9
top=$(cd "$(dirname "$0")/.." && pwd)

inst() { # mode source target-dir [name]
    mkdir -p "$dest$3"
    install -m "$1" "$2" "$dest$3/${4:-$(basename "$2")}"
    echo "install: $3/${4:-$(basename "$2")}"
}

inst 0755 "$build/ephemerald" "$bindir"
inst 0755 "$build/ephemeral" "$bindir"
inst 0755 "$build/ephemeral-sandbox" "$bindir"
inst 0755 "$build/ephemeral-init" "$libexecdir"
inst 0644 "$build/ephemeral-gvisor-compat.so" "$libexecdir"
# bash completion: one file for both programs, named after each (bash-completion loads a command's
# completion by the command's name).
inst 0644 "$top/dist/completion/ephemeral.bash" "$compdir" ephemeral
inst 0644 "$top/dist/completion/ephemeral.bash" "$compdir" ephemerald
inst 0644 "$top/man/ephemeral.1" "$mandir/man1"
inst 0644 "$top/man/ephemerald.8" "$mandir/man8"

# The recorded examples (request and transcript of each): the replay model's answers.
for d in "$top"/examples/*/; do
    name=$(basename "$d")
    for f in "$d"request.json "$d"transcript.jsonl; do
        [ -f "$f" ] && inst 0644 "$f" "$datadir/examples/$name"
    done
done
inst 0644 "$top/ephemerald.example.json" "$datadir"

# The configuration: the example's, with the installed paths (the guest agent is found beside
# the programs' libexec directory, so init_path goes; the replay model reads the installed
# examples). Relative paths (db, image, secret key) are under the service's working directory.
conf="$dest$sysconfdir/ephemeral/ephemerald.json"
if [ -e "$conf" ]; then
    echo "install: $sysconfdir/ephemeral/ephemerald.json exists: kept as it is"
else
    mkdir -p "$(dirname "$conf")"
    sed -e '/"init_path":/d' \
        -e "s|\"transcripts\": \"examples\"|\"transcripts\": \"$datadir/examples\"|" \
        "$top/ephemerald.example.json" >"$conf.tmp"
    chmod 0644 "$conf.tmp"
    mv "$conf.tmp" "$conf"
    echo "install: $sysconfdir/ephemeral/ephemerald.json"
fi

mkdir -p "$dest$unitdir"
sed -e "s|/usr/local/bin/ephemerald|$bindir/ephemerald|" \
    -e "s|/etc/ephemeral/ephemerald.json|$sysconfdir/ephemeral/ephemerald.json|" \
    "$top/dist/ephemerald.service" >"$dest$unitdir/ephemerald.service"
chmod 0644 "$dest$unitdir/ephemerald.service"
echo "install: $unitdir/ephemerald.service"
