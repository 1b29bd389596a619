#!/bin/sh
# Rerun the colors experiment (libasync-mp thesis 5.2, SFS on 1 and 2 CPUs): the
# sealing server with one color for everything vs per-connection colors, on 1 and 2
# workers, plus the cost of colored events; results where the committed ones live.
# About 3 minutes with the defaults (add --per-stage for the per-stage pools, ~5 min).
# It needs both cores: it takes /work/coord/bench.lock when that exists, and prints
# the load average, which the results record too. Extra arguments go to
# `seda experiment colors` (e.g. --block-kib 64, --rounds 5, --quick).
set -eu
cd "$(dirname "$0")/../.."
cargo build --release -p seda-cli
target="${CARGO_TARGET_DIR:-target}"
echo "load before: $(cat /proc/loadavg)"
if [ -e /work/coord/bench.lock ]; then
    exec flock /work/coord/bench.lock "$target/release/seda" experiment colors --out docs/colors "$@"
fi
exec "$target/release/seda" experiment colors --out docs/colors "$@"
