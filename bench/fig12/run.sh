#!/usr/bin/env bash
# Rerun SEDA SOSP'01 Fig. 12 (Haboob vs nginx vs Apache) on this machine and write the
# results where the committed ones live. Extra arguments go to `seda experiment fig12`
# (e.g. --servers nginx,apache-prefork --duration-s 10). It takes the benchmark lock
# and waits for a quiet machine (bench/lib.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
. bench/lib.sh
bench_lock
cargo build --release -p seda-cli
target="${CARGO_TARGET_DIR:-target}"
bench_begin fig12
"$target/release/seda" experiment fig12 --out docs/fig12 "$@"
