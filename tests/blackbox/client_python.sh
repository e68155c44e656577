#!/bin/bash
# The Python client (clients/python, docs/CLIENTS.md) against the real server: installed with pip into a
# fresh virtual environment without the network (--no-index --no-build-isolation, on the
# system's setuptools), then its unittest suite, which runs the seed example end to end,
# pages through runs and filters them on metadata, checks typed errors (404, 400, 401, 403),
# idempotent creates, models and balance, the admin calls, retries after Retry-After and resumed
# event streams through stand-in servers on loopback, and that every operation of
# docs/openapi.yaml is one the client sends.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/api_common.sh"
. "$(dirname "$0")/client_common.sh"
test_deadline 600
have_image || skip "no sandbox image (make image)"
# An interpreter that can build the package offline: setuptools and wheel (Debian:
# python3-setuptools, python3-wheel) and venv; the first python3 on PATH that has them.
python=""
for candidate in $(type -ap python3); do
    if "$candidate" -c 'import venv, ensurepip, setuptools, wheel' 2>/dev/null; then
        python=$candidate
        break
    fi
done
[ -n "$python" ] || fail "no python3 with venv, setuptools and wheel (Debian: python3-venv python3-setuptools python3-wheel)"

# A copy of the package, so the build's files stay out of the tree; the venv sees the system's
# setuptools, and --no-build-isolation keeps pip from fetching one.
cp -r "$TOP/clients/python" "$TEST_TMP/src" || fail "copy clients/python"
"$python" -m venv --system-site-packages "$TEST_TMP/venv" || fail "python3 -m venv"
"$TEST_TMP/venv/bin/pip" install --no-index --no-build-isolation --disable-pip-version-check -q \
    "$TEST_TMP/src" || fail "pip install clients/python without the network"
py=$TEST_TMP/venv/bin/python
# The installed package, not the source tree: its files and its type marker are there.
where=$(cd "$TEST_TMP" && "$py" -c 'import ephemeral, os; print(os.path.dirname(ephemeral.__file__))')
case $where in "$TEST_TMP/venv/"*) ;; *) fail "ephemeral imported from $where, not the venv" ;; esac
[ -f "$where/py.typed" ] || fail "py.typed is not installed"

# The type hints hold (mypy, Debian: mypy), for the oldest Python the package supports.
if "$python" -m mypy --version >/dev/null 2>&1; then
    out=$("$python" -m mypy --strict --python-version 3.9 --cache-dir "$TEST_TMP/mypy" \
        "$TEST_TMP/src/src/ephemeral" 2>&1) || fail "mypy --strict: $out"
else
    echo "note: no mypy for $python: the type check is not run"
fi

start_client_server

cd "$TEST_TMP" || fail "cd"
out=$(PYTHONPATH=$TOP/clients/python/tests "$py" -m unittest discover -v \
    -s "$TOP/clients/python/tests" -t "$TOP/clients/python/tests" 2>&1)
rc=$?
printf '%s\n' "$out"
[ $rc -eq 0 ] || fail "the Python client's tests failed"
assert_not_contains "$out" "skipped" "no test skipped"
ran=$(sed -n 's/^Ran \([0-9]*\) tests.*/\1/p' <<<"$out")
[ "${ran:-0}" -ge 34 ] || fail "only ${ran:-0} tests ran"

# The example script, as the README shows it.
out=$("$py" "$TOP/clients/python/examples/seed.py" "$EPHEMERAL_SEED") || fail "examples/seed.py: $out"
assert_contains "$out" "completed" "example status"
assert_contains "$out" "worker.destroyed" "example events"
# The README's ten lines, run as they are written, from the repository's top.
awk '/^```python$/ {on = 1; next} /^```$/ {if (on) exit} on' "$TOP/clients/python/README.md" \
    >"$TEST_TMP/readme.py"
[ "$(wc -l <"$TEST_TMP/readme.py")" -le 10 ] || fail "the README's example is over ten lines"
out=$(cd "$TOP" && "$py" "$TEST_TMP/readme.py") || fail "the README's example: $out"
assert_contains "$out" "completed" "README example status"
assert_contains "$out" "2 3 5 7 11 13 17 19 23 29 31 37 41 43 47" "README example result"
echo "python client: $ran tests passed, pip-installed offline"
