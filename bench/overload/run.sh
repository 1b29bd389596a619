#!/usr/bin/env bash
# Rerun the overload-control experiment (SEDA Fig. 13, USITS'03 Figs. 10, 12-15: the
# capacity at the knee, the CPU per refusal, many users, every admission policy and
# nginx's limit_req on a spike, degradation with admission control, two classes;
# 3 repeats each) on this machine and write the results where the committed ones
# live. About 21 minutes plus the release build. Extra arguments go to
# `seda experiment overload` (e.g. --only spike/default, --repeats 1, or --quick).
#
# It needs the whole machine: it takes the benchmark lock and waits for a quiet
# machine (bench/lib.sh), and prints the load average, which the results record too.
set -euo pipefail
cd "$(dirname "$0")/../.."
. bench/lib.sh
bench_lock
cargo build --release -p seda-cli
target="${CARGO_TARGET_DIR:-target}"
bench_begin overload
"$target/release/seda" experiment overload \
    --scenarios knee,refusal,fig13,degrade,classes,policies --scale 0.7 \
    --out docs/overload "$@"
