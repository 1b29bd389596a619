#!/usr/bin/env bash
# Rerun USITS'03 Figs. 8, 9, 10, 11, 14-15 on Arashi with emulated mail readers and
# write the results where the committed ones live (docs/arashi); ~18 minutes. Run
# scripts/fetch-spamassassin.sh first for the real corpus. Extra arguments go to
# `seda experiment arashi`. It takes the benchmark lock and waits for a quiet machine
# (bench/lib.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
. bench/lib.sh
bench_lock
cargo build --release -p seda-cli
target="${CARGO_TARGET_DIR:-target}"
bench_begin arashi
"$target/release/seda" experiment arashi --out docs/arashi "$@"
