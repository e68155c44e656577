#!/bin/sh
# bench/run.sh BUILD [--quick] [--only start,backends,gvisor,exec,api,history,pg,queue,density,broker,model,
#                                       sandboxes,images,outputs,live]
# The benchmarks, side by side with bubblewrap and gVisor: `make bench` runs this after building
# the programs, the image and build/bench/bench_exec. See docs/BENCH.md.
set -eu
build=${1:?usage: bench/run.sh BUILD [--quick] [--only LIST]}
shift
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
[ "$(id -u)" -eq 0 ] || { echo "bench: the namespaces backend and the peers' density runs need root" >&2; exit 2; }
[ -x "$build/ephemerald" ] || { echo "bench: $build/ephemerald is missing: run 'make bench'" >&2; exit 2; }
[ -e var/images/default ] || { echo "bench: no image at var/images/default: run 'make image'" >&2; exit 2; }
[ -x "$build/bench/bench_exec" ] || echo "bench: $build/bench/bench_exec is missing (make $build/bench/bench_exec); its rows will be n/a" >&2
for tool in bwrap runsc; do
    command -v "$tool" >/dev/null 2>&1 || echo "bench: $tool is not installed: its columns will be n/a" >&2
done
# The whole run is bounded: every phase has its own count and time cap (the image builds of
# section 8a 300 s each), and this is the backstop.
exec timeout --signal=INT --kill-after=30 1500 python3 bench/bench.py "$build" "$@"
