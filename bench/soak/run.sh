#!/usr/bin/env bash
# Soak: Haboob under cycles of overload spikes and hostile clients for 30 minutes
# (`seda experiment soak --out docs/soak`, niced); exits 1 if memory
# grows without bound or a well-behaved request goes unanswered. It measures no time,
# so it runs at any load, but it takes the benchmark lock (bench/lib.sh): no
# benchmark runs beside it. Extra arguments go to `seda experiment soak` (e.g.
# --minutes 5, --quick); OUT sets the output directory (default docs/soak).
set -euo pipefail
cd "$(dirname "$0")/../.."
. bench/lib.sh
bench_lock
cargo build --release -p seda-cli
target="${CARGO_TARGET_DIR:-target}"
bench_begin --any-load soak
nice "$target/release/seda" experiment soak --out "${OUT:-docs/soak}" "$@"
