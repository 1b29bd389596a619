#!/bin/sh
# Rerun the overload-control experiment (USITS'03 Figs. 10, 14-15: the capacity at the
# knee, the CPU per refusal, the admission policies and nginx's limit_req on a spike,
# two classes; 3 repeats each) on this machine and write the results where the
# committed ones live. About 22 minutes with the defaults. Extra arguments go to
# `seda experiment overload` (e.g. --scenarios spike,fig13,degrade, --scale 0.75,
# --only spike/default, or --quick).
set -eu
cd "$(dirname "$0")/../.."
cargo build --release -p seda-cli
target="${CARGO_TARGET_DIR:-target}"
exec "$target/release/seda" experiment overload --out docs/overload "$@"
