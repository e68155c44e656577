#!/bin/sh
# make lint: static analysis of the project's code, warnings as errors (cppcheck), a check that
# the code is formatted (clang-format --dry-run), the layer rule (scripts/check-layers.sh), and the
# OpenAPI document's lint (scripts/lint-openapi.sh: Redocly and Spectral).
set -eu
cd "$(dirname "$0")/.."
cppcheck --quiet --error-exitcode=1 --enable=warning,portability,performance \
    --std=c11 --inline-suppr -D__GNUC__ -DEPH_LINT -Isrc \
    --suppress=missingIncludeSystem --suppress=unknownMacro \
    src
files=$(git ls-files 'src/*.c' 'src/*.h')
# shellcheck disable=SC2086
clang-format --dry-run --Werror $files
scripts/check-layers.sh
scripts/lint-openapi.sh
echo "lint: clean"
