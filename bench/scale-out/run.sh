#!/usr/bin/env bash
# Rerun the scale-out experiment (seda serve replicas behind HAProxy, agent checks,
# 503s retried on another replica) and write the results where the committed ones
# live (docs/scale-out). About 6 minutes plus the release build; the experiment
# installs Debian's haproxy with apt-get if it is missing. Extra arguments go to
# `seda experiment scale-out` (e.g. --scenarios slowed --quick).
#
# It needs the whole machine: it takes the benchmark lock and waits for a quiet
# machine (bench/lib.sh), and prints the load average, which the results record too.
#
# Linux schedules each session as a group (autogroup): on a machine shared with other
# work, the replicas would get one group's share of the CPU whatever their number.
# As root, this script raises its session's share (autogroup nice -10) for the run
# so that the replicas get the cores they are pinned to; elsewhere it runs at the
# normal share.
set -euo pipefail
cd "$(dirname "$0")/../.."
. bench/lib.sh
bench_lock
cargo build --release -p seda-cli
target="${CARGO_TARGET_DIR:-target}"
bench_begin scale-out
if echo -10 >/proc/self/autogroup 2>/dev/null; then
    bench_at_exit 'echo 0 >/proc/self/autogroup'
else
    echo "run.sh: normal CPU share (not root, or no autogroup)" >&2
fi
"$target/release/seda" experiment scale-out --out docs/scale-out "$@"
