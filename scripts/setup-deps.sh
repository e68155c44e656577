#!/bin/sh
# Installs the Debian packages a step needs when they are missing: idempotent, and silent when
# everything is already there. Usage: setup-deps.sh GROUP... (build, demo, test, bench, lint, fuzz,
# runtime)
set -eu

build="build-essential pkg-config libmicrohttpd-dev libjansson-dev libcurl4-openssl-dev
       libseccomp-dev libsodium-dev libsqlite3-dev libcmocka-dev mmdebstrap debootstrap
       libjs-marked node-dompurify libpq-dev zlib1g-dev libbrotli-dev libssl-dev"
test="$build curl jq uuid-runtime sqlite3 python3 python3-yaml iproute2 procps util-linux
      qemu-system-x86 e2fsprogs chromium chromium-driver postgresql clang libclang-rt-14-dev"
bench="$test bubblewrap runsc tinyproxy"
# The OpenAPI linters (tools/openapi-lint: Redocly, Spectral) run on Node.js from npm ci.
lint="$build cppcheck clang-format clang-tidy nodejs npm"
fuzz="$build clang libclang-rt-14-dev"
demo="$build curl"
# The clients' tests (clients/, part of test): a venv that builds with setuptools and wheel, mypy;
# Node.js with npm.
clients="python3-venv python3-setuptools python3-wheel mypy nodejs npm"
# What an installed server needs at run time, without the build (dist/Containerfile): its
# libraries, the CA store for the broker and the model providers, and mmdebstrap for the image.
runtime="libmicrohttpd12 libjansson4 libcurl4 libsodium23 libsqlite3-0 libpq5 libssl3 ca-certificates
         mmdebstrap e2fsprogs curl"

want=""
[ $# -eq 0 ] && set -- build
for group in "$@"; do
    case "$group" in
    build) want="$want $build" ;;
    test) want="$want $test $clients" ;;
    bench) want="$want $bench" ;;
    lint) want="$want $lint" ;;
    fuzz) want="$want $fuzz" ;;
    demo) want="$want $demo" ;;
    runtime) want="$want $runtime" ;;
    *) echo "usage: $0 build|demo|test|bench|lint|fuzz|runtime..." >&2; exit 2 ;;
    esac
done

missing=""
for p in $want; do
    case " $missing " in *" $p "*) continue ;; esac
    # A Node.js installed otherwise (with its own npm) serves as well as Debian's packages,
    # which would conflict with it.
    case $p in nodejs | npm) command -v node >/dev/null && command -v npm >/dev/null && continue ;; esac
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
        missing="$missing $p"
    fi
done
[ -z "$missing" ] && exit 0

echo "setup: installing$missing" >&2
if [ "$(id -u)" -ne 0 ]; then
    SUDO=sudo
else
    SUDO=
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
