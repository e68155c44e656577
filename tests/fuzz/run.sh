#!/bin/bash
# Builds every tests/fuzz/fuzz_*.c with clang's libFuzzer and AddressSanitizer and runs each for a
# bounded time (FUZZ_SECONDS, default 30). Used by `make fuzz`. Each driver is linked with the
# project sources it includes (sources_for() below) and the project's libraries; it starts from the
# seeds in tests/fuzz/corpus/NAME/ when there are some. FUZZ_ONLY=PATTERN runs only the drivers
# whose name contains PATTERN. Crashes are kept as $BUILD/fuzz/NAME-crash-*. FUZZ_GEN_DIR (set by
# `make fuzz`) is the folder of the generated headers (the seccomp filter's).
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
out=${BUILD:-$top/build}/fuzz
seconds=${FUZZ_SECONDS:-30}
CLANG=${CLANG:-clang}
mkdir -p "$out"
command -v "$CLANG" >/dev/null || { echo "fuzz: clang not found" >&2; exit 1; }

# Every source of the server but its two mains and src/common (always taken): the Makefile's
# DAEMON_LIB_SRC, which `make fuzz` passes (FUZZ_DAEMON_SRC), so that the two cannot drift apart;
# run by hand, the same list made here.
daemon_sources() {
    if [ -n "${FUZZ_DAEMON_SRC:-}" ]; then
        echo "$FUZZ_DAEMON_SRC"
        return
    fi
    (cd "$top" && ls src/guest/protocol.c src/guest/seccomp.c src/store/*.c src/ledger/*.c src/run/*.c \
        src/agent/*.c src/sandbox/*.c src/sandbox/namespaces/*.c src/sandbox/gvisor/*.c \
        src/sandbox/microvm/*.c src/api/*.c src/daemon/*.c \
        $(ls -d src/broker 2>/dev/null | sed 's|$|/*.c|') | grep -v -e '^src/daemon/main\.c$' \
        -e '^src/daemon/sandbox_main\.c$' | tr '\n' ' ')
}

# Sources a driver needs that no header it includes is named after (a provider's parser declared
# in a shared header).
extra_for() {
    case "$1" in
    fuzz_broker_http) echo "src/broker/addr.c" ;; # http.c parses hosts with addr.c
    *) echo "" ;;
    esac
}

# The project sources a driver needs: src/common/*.c and its extras, then, to a fixed point,
# src/X/Y.c for every "X/Y.h" included by the driver, by a header beside it, or by a source
# already taken.
sources_for() {
    local files="$1" srcs todo inc c extra
    extra=$(extra_for "$(basename "$1" .c)")
    srcs=" $(cd "$top" && ls src/common/*.c | tr "\n" " ") $extra "
    todo="$1 $(cd "$top" && ls src/common/*.c | sed "s|^|$top/|")"
    for c in $extra; do todo="$todo $top/$c"; done
    while [ -n "$todo" ]; do
        files=$todo
        todo=
        for f in $files; do
            for inc in $(sed -n 's/^#include "\([^"]*\)"/\1/p' "$f"); do
                if [ -f "$top/tests/fuzz/$inc" ]; then
                    case " $seen " in *" $inc "*) ;; *) seen="$seen $inc"; todo="$todo $top/tests/fuzz/$inc" ;; esac
                fi
                c=src/${inc%.h}.c
                [ -f "$top/$c" ] || continue
                case " $srcs " in *" $c "*) ;; *) srcs="$srcs $c"; todo="$todo $top/$c" ;; esac
            done
        done
    done
    echo "$srcs"
}
PKGS="libmicrohttpd jansson libcurl libseccomp libsodium libpq sqlite3 zlib libbrotlidec"
# shellcheck disable=SC2086
LIBS=$(pkg-config --libs $PKGS 2>/dev/null)
# shellcheck disable=SC2086
PKG_CFLAGS=$(pkg-config --cflags $PKGS 2>/dev/null)

FUZZ_CFLAGS="-std=gnu11 -g -O1 -D_GNU_SOURCE -Isrc -Itests/fuzz ${FUZZ_GEN_DIR:+-I$FUZZ_GEN_DIR} $PKG_CFLAGS -fno-sanitize-recover=all"

# The configuration knows the image, the sandbox and the model providers, and the API's validation
# reads it: the drivers of those link the server's whole library, built once (instrumented) into
# $out/daemon.a and reused.
whole_library() {
    case "$1" in fuzz_api_* | fuzz_config | fuzz_*_response | fuzz_transcript | fuzz_model_sse) return 0 ;; *) return 1 ;; esac
}
daemon_lib() {
    local lib=$out/daemon.a objdir=$out/daemon-obj src o objs= list
    # Built again when a source changed or the list of sources did.
    list="$(cd "$top" && ls src/common/*.c) $(daemon_sources)"
    [ -f "$lib" ] && [ -z "$(cd "$top" && find src -name '*.[ch]' -newer "$lib" | head -n 1)" ] &&
        [ "$(cat "$out/daemon.list" 2>/dev/null)" = "$list" ] && return 0
    echo "fuzz: building the server's library"
    mkdir -p "$objdir"
    for src in $list; do
        o=$objdir/$(echo "$src" | tr / _).o
        # shellcheck disable=SC2086
        (cd "$top" && "$CLANG" $FUZZ_CFLAGS -fsanitize=fuzzer-no-link,address,undefined -c \
            "$src" -o "$o") || return 1
        objs="$objs $o"
    done
    rm -f "$lib"
    # shellcheck disable=SC2086
    ar rcs "$lib" $objs && printf '%s' "$list" >"$out/daemon.list"
}

status=0
for drv in "$top"/tests/fuzz/fuzz_*.c; do
    name=$(basename "$drv" .c)
    # FUZZ_ONLY=PATTERN: only the drivers whose name contains PATTERN.
    case "$name" in *"${FUZZ_ONLY:-}"*) ;; *) continue ;; esac
    seen=
    if whole_library "$name"; then
        daemon_lib || { echo "fuzz: the server's library does not build" >&2; exit 1; }
        srcs=$out/daemon.a
    else
        srcs=$(sources_for "$drv")
    fi
    bin=$out/$name
    echo "fuzz: building $name"
    # shellcheck disable=SC2086
    if ! (cd "$top" && "$CLANG" $FUZZ_CFLAGS -fsanitize=fuzzer,address,undefined -o "$bin" \
        "$drv" $srcs $LIBS -lpthread -lm); then
        echo "fuzz: $name does not build" >&2
        status=1
        continue
    fi
    # A committed seed corpus (tests/fuzz/corpus/NAME) is read; new inputs go to the build dir.
    corpus=$out/$name.corpus
    mkdir -p "$corpus"
    echo "fuzz: running $name for ${seconds}s"
    seeds=$top/tests/fuzz/corpus/$name
    [ -d "$seeds" ] || seeds=
    # shellcheck disable=SC2086
    if ! "$bin" -max_total_time="$seconds" -rss_limit_mb=1024 -print_final_stats=1 \
        -artifact_prefix="$out/$name-" "$corpus" $seeds >"$out/$name.log" 2>&1; then
        echo "fuzz: $name FAILED (log: $out/$name.log)" >&2
        tail -n 30 "$out/$name.log" >&2
        status=1
    else
        grep -E '^stat::number_of_executed_units' "$out/$name.log" || true
        echo "fuzz: $name ok"
    fi
done
exit $status
