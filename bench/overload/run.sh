#!/bin/sh
# Rerun the overload-control experiment (SEDA Fig. 13, USITS'03 Figs. 10, 12-15, and the
# admission policies side by side) on this machine and write the results where the
# committed ones live. About 17 minutes with the defaults. Extra arguments go to
# `seda experiment overload` (e.g. --scenarios spike,policies --scale 0.5, or --quick).
set -eu
cd "$(dirname "$0")/../.."
cargo build --release -p seda-cli
target="${CARGO_TARGET_DIR:-target}"
exec "$target/release/seda" experiment overload --out docs/overload "$@"
