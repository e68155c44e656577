#!/bin/sh
# make lint: static analysis of the project's code, warnings as errors (cppcheck), a check that
# the code is formatted (clang-format --dry-run), the layer rule (scripts/check-layers.sh), the
# length of functions and files (scripts/check-function-length.sh), and the
# OpenAPI document's lint (scripts/lint-openapi.sh: Redocly and Spectral), and that the code
# cites the project's own docs/, never a specification outside the repository.
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
scripts/check-function-length.sh
# shellcheck disable=SC2086
if grep -nwE 'SPEC(\.md)?' $files; then
    echo "lint: the lines above cite a SPEC outside the repository: cite the docs/ page" >&2
    exit 1
fi
scripts/lint-openapi.sh
echo "lint: clean"
