#!/bin/sh
# Rerun Flash (USENIX'99) sections 5-6 on this machine: Haboob's file helper (AMPED)
# vs blocking reads on its event loop (SPED) vs nginx with and without `aio threads`
# as the share of a 1 GiB SPECweb99 set that fits a memory cgroup shrinks, then
# Haboob's caches one by one; results where the committed ones live. Needs root
# (cgroup v1 memory controller). Extra arguments go to `seda experiment flash`
# (e.g. --shares 100,25 --servers haboob-amped,haboob-sped, --cold, --quick).
set -eu
cd "$(dirname "$0")/../.."
cargo build --release -p seda-cli
target="${CARGO_TARGET_DIR:-target}"
exec "$target/release/seda" experiment flash --out docs/flash \
    --fileset-dir /var/tmp/seda-flash-sets "$@"
