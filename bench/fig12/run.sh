#!/bin/sh
# Rerun SEDA SOSP'01 Fig. 12 (Haboob vs nginx vs Apache) on this machine and write the
# results where the committed ones live. Extra arguments go to `seda experiment fig12`
# (e.g. --servers nginx,apache-prefork --duration-s 10).
set -eu
cd "$(dirname "$0")/../.."
cargo build --release -p seda-cli
target="${CARGO_TARGET_DIR:-target}"
exec "$target/release/seda" experiment fig12 --out docs/fig12 "$@"
