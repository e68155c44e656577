#!/bin/sh
# The layer rule (README, "Source code layout"): a module of src/ may include the headers of its
# own module and of the modules below it, never of one above nor of another module of its own layer
# (unless SIDEWAYS lists the pair). Run by `make lint`; prints every #include that breaks it and
# fails when there is one.
#
#   daemon                 6  start-up, commands, configuration parsing
#   api                    5  the HTTP API and its JSON wire forms
#   run                    4  scheduler, worker, live timelines, service
#   agent  image           3  the agent loop, tools, model providers; images (built, imported)
#   sandbox  broker        2  the sealed machine; the way out of it
#   store  ledger  guest   1  plain records and their storage; money arithmetic; the guest protocol
#   cli                    1  the client: common/ only
#   common                 0  compat, log, buffers, clock, money, ids, config struct, sink
#
# KNOWN lists the includes that still point up, each with the change that removes it; an entry
# that no longer occurs is reported (without failing) so that it is removed: the list only
# shrinks.
set -eu
cd "$(dirname "$0")/.."

KNOWN=''
# Modules of one layer do not include each other (sandbox and broker, store, ledger and guest)
# unless the pair is listed here, "FROM TO" words two by two, each with why. None is today.
SIDEWAYS=''

git ls-files 'src/*.c' 'src/*.h' | xargs grep -H '^#include "[a-z_]*/' |
    awk -v known="$KNOWN" -v sideways_list="$SIDEWAYS" '
BEGIN {
    split("common:0 store:1 ledger:1 guest:1 cli:1 sandbox:2 broker:2 agent:3 image:3 run:4 api:5 daemon:6",
          pairs, " ")
    for (i in pairs) { split(pairs[i], kv, ":"); rank[kv[1]] = kv[2] }
    n = split(sideways_list, sw, " ")
    for (i = 1; i + 1 <= n; i += 2) sideways[sw[i] " " sw[i + 1]] = 1
    n = split(known, lines, "\n")
    for (i = 1; i <= n; i++) { split(lines[i], f, " "); allowed[f[1] " " f[2]] = 1 }
    bad = 0
}
{
    file = $0; sub(/:.*/, "", file)
    inc = $0; sub(/^[^"]*"/, "", inc); sub(/".*/, "", inc)
    split(file, p, "/"); from = p[2]
    split(inc, q, "/"); to = q[1]
    if (!(from in rank)) { printf "%s: module %s has no layer (scripts/check-layers.sh)\n", file, from; bad = 1; next }
    if (!(to in rank)) next
    if (from == to) next
    # Down is allowed; sideways (two modules of one layer) only where SIDEWAYS lists the pair.
    if (rank[to] < rank[from] && !(from == "cli" && to != "common")) next
    if (rank[to] == rank[from] && ((from " " to) in sideways)) next
    key = file " " inc
    if (key in allowed) { seen[key] = 1; next }
    printf "%s includes %s: %s (layer %d) may not include %s (layer %d)\n", file, inc, from, rank[from], to, rank[to]
    bad = 1
}
END {
    for (k in allowed) if (!(k in seen)) printf "scripts/check-layers.sh: \"%s\" no longer occurs: remove it from KNOWN\n", k
    exit bad
}'
echo "layers: every include points down"
