#!/usr/bin/env bash
# The runtime's stage hop and 5-stage pipeline against a raw crossbeam-channel
# pipeline, both thread models, event by event and batch forwarding, queued and with
# inline handoff: `cargo bench -p seda --bench pipeline` (interleaved rounds, medians
# and spread, ratios per round; ~1 min), under the benchmark lock on a quiet machine
# (bench/lib.sh). Environment: SEDA_BENCH_ROUNDS (rounds, default 7), SEDA_BENCH_ONLY
# (crossbeam and the configurations whose name contains it), SEDA_BENCH_STAGES (one
# pipeline length); see crates/seda/benches/pipeline.rs. Extra arguments go to the
# bench binary.
set -euo pipefail
cd "$(dirname "$0")/../.."
. bench/lib.sh
bench_lock
cargo bench -p seda --bench pipeline --no-run -q
bench_begin pipeline
cargo bench -q -p seda --bench pipeline -- "$@"
