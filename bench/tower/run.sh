#!/usr/bin/env bash
# seda-tower's `AdmissionLayer` overhead per request against no layer and
# `tower::limit::ConcurrencyLimit`, one and two callers: `cargo bench -p seda-tower
# --bench overhead` (criterion; prints ns/request and both ratios at the end,
# ~1.5 min), under the benchmark lock on a quiet machine (bench/lib.sh). Extra
# arguments go to criterion (e.g. a filter).
set -euo pipefail
cd "$(dirname "$0")/../.."
. bench/lib.sh
bench_lock
cargo bench -p seda-tower --bench overhead --no-run -q
bench_begin tower
cargo bench -q -p seda-tower --bench overhead -- "$@"
