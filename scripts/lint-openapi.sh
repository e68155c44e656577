#!/bin/sh
# The OpenAPI document's lint (part of make lint): Redocly and Spectral, the versions pinned in
# tools/openapi-lint/package-lock.json and installed with npm ci when that lock changed. Any
# warning fails, as an error does: the document is kept clean.
set -eu
cd "$(dirname "$0")/../tools/openapi-lint"
if [ ! -e node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
    npm ci --no-audit --no-fund --loglevel=error >/dev/null
fi
doc=../../docs/openapi.yaml
out=$(./node_modules/.bin/redocly lint "$doc" --format=stylish 2>&1) || { printf '%s\n' "$out" >&2; exit 1; }
if printf '%s\n' "$out" | grep -E '^ +[0-9]+:[0-9]+ +(error|warning) ' >&2; then
    echo "openapi: redocly found the problems above" >&2
    exit 1
fi
./node_modules/.bin/spectral lint --quiet -r spectral.yaml --fail-severity=warn "$doc"
echo "openapi: clean (redocly, spectral)"
