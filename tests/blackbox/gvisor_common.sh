# Shared helpers for the gvisor backend's black-box tests (sourced, not run: it is not executable).
#
#   . "$(dirname "$0")/gvisor_common.sh"
#
# Skips (exit 77, with the reason) when the image is missing, runsc is not installed or the
# gvisor backend's probe fails on this host. Provides:
#   gv_run [sandbox run args...] -- CMD...   `ephemerald sandbox run --backend gvisor` (bounded in
#                                            time); sets GV_RC, GV_OUT, GV_ERR; then gv_assert_clean
#   gv_assert_clean                          fails when any gVisor sandbox of a process that is no
#                                            longer running left something: a bundle directory, a
#                                            runsc process, a cgroup
. "$(dirname "$0")/lib.sh"

: "${EPHEMERAL_IMAGE:=$TOP/var/images/default}"
export EPHEMERAL_IMAGE
[ -d "$EPHEMERAL_IMAGE" ] || skip "no sandbox image at $EPHEMERAL_IMAGE (make image)"
[ -x "$EPHD" ] || fail "no $EPHD"
command -v runsc >/dev/null 2>&1 || skip "runsc is not installed (Debian package runsc)"
GV_TIMEOUT=${GV_TIMEOUT:-120}
GV_DIR=/run/ephemeral/gvisor

# Sandboxes are named <tag>-<pid>-gv<n> after the process that made them (bundle, runsc container
# and cgroup alike): whatever carries the name of a process that is gone is a leak. Sandboxes of
# processes still running (another test, a server) are theirs and are left alone, and so is what
# was already there when this test started (a test that kills a server on purpose leaves its
# sandboxes for the next server's start-up to remove).
_gv_baseline=" $(ls "$GV_DIR" 2>/dev/null | tr '\n' ' ') $(ls /sys/fs/cgroup/*/ephemeral/ 2>/dev/null | grep -- '-gv' | tr '\n' ' ') "
_gv_owner_dead() { # name
    local p=${1#*-}
    p=${p%%-*}
    [[ $p =~ ^[0-9]+$ ]] || return 1
    case $_gv_baseline in *" $1 "*) return 1 ;; esac
    ! kill -0 "$p" 2>/dev/null
}

gv_assert_clean() {
    local d c n
    for d in "$GV_DIR"/*-gv*; do
        [ -e "$d" ] || continue
        n=${d##*/}
        ! _gv_owner_dead "$n" || fail "gVisor bundle left behind: $d ($(ls -A "$d" | tr '\n' ' '))"
    done
    for c in /sys/fs/cgroup/*/ephemeral/*-gv* /sys/fs/cgroup/ephemeral/*-gv*; do
        [ -d "$c" ] || continue
        n=${c##*/}
        ! _gv_owner_dead "$n" || fail "gVisor cgroup left behind: $c"
    done
    # runsc, runsc-gofer and runsc-sandbox all carry --root=$GV_DIR/<name>/state.
    while read -r pid args; do
        n=${args#*"$GV_DIR"/}
        n=${n%%/*}
        ! _gv_owner_dead "$n" || fail "runsc process outlived its sandbox: $pid $args"
    done < <(ps -eo pid=,args= | G="$GV_DIR/" awk 'index($0, ENVIRON["G"]) && !/awk/')
    return 0
}

gv_run() {
    local out=$TEST_TMP/gv.out err=$TEST_TMP/gv.err
    # SIGTERM at the bound (ephemerald then interrupts and destroys the sandbox), SIGKILL later.
    timeout -k 10 "$GV_TIMEOUT" "$EPHD" sandbox run --backend gvisor "$@" >"$out" 2>"$err"
    GV_RC=$?
    GV_OUT=$(cat "$out")
    GV_ERR=$(cat "$err")
    [ "$GV_RC" -ne 124 ] || fail "ephemerald sandbox run did not finish within ${GV_TIMEOUT}s"
    gv_assert_clean
}

# The probe: runsc works here, a sandbox boots and runs a command. Otherwise skip, saying why.
gv_run -- true
if [ "$GV_RC" -ne 0 ]; then
    case $GV_ERR in
    *"does not work here"*) skip "gvisor backend unavailable: $(tail -n 1 <<<"$GV_ERR" | sed 's/.*does not work here: //')" ;;
    esac
    fail "a trivial command failed under gvisor (status $GV_RC): $GV_ERR"
fi
