#!/usr/bin/env bash
# Rerun the colors experiment (libasync-mp thesis 5.2, SFS on 1 and 2 CPUs): the
# sealing server with one color for everything vs per-connection colors, on 1 and 2
# workers, plus the cost of colored events; results where the committed ones live.
# About 3 minutes with the defaults (add --per-stage for the per-stage pools, ~5 min).
# It needs both cores: it takes the benchmark lock and waits for a quiet machine
# (bench/lib.sh), and prints the load average, which the results record too. Extra
# arguments go to `seda experiment colors` (e.g. --block-kib 64, --rounds 5, --quick).
set -euo pipefail
cd "$(dirname "$0")/../.."
. bench/lib.sh
bench_lock
cargo build --release -p seda-cli
target="${CARGO_TARGET_DIR:-target}"
bench_begin colors
"$target/release/seda" experiment colors --out docs/colors "$@"
