#!/usr/bin/env bash
# Rerun Flash (USENIX'99) sections 5-6 on this machine: Haboob's file helper (AMPED)
# vs blocking reads on its event loop (SPED) vs nginx with and without `aio threads`
# as the share of a 1 GiB SPECweb99 set that fits a memory cgroup shrinks, then
# Haboob's caches one by one; results where the committed ones live. Needs root
# (cgroup v1 memory controller). Extra arguments go to `seda experiment flash`
# (e.g. --shares 100,25 --servers haboob-amped,haboob-sped, --cold, --quick).
# It takes the benchmark lock and waits for a quiet machine (bench/lib.sh). The file
# sets are kept between runs in FILESET_DIR (default /var/tmp/seda-flash-sets).
set -euo pipefail
cd "$(dirname "$0")/../.."
. bench/lib.sh
bench_lock
cargo build --release -p seda-cli
target="${CARGO_TARGET_DIR:-target}"
bench_begin flash
"$target/release/seda" experiment flash --out docs/flash \
    --fileset-dir "${FILESET_DIR:-/var/tmp/seda-flash-sets}" "$@"
