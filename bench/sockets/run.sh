#!/usr/bin/env bash
# SEDA Fig. 11 on loopback: seda-io socket stages vs a thread-per-connection server,
# N = 1, 4, 16, ... up to --max-clients (default 4096). Builds in release, runs both
# servers in one invocation and prints MB/s, packets/s and the ratio per N.
#
#   bench/sockets/run.sh [--max-clients N] [--secs S] [--warmup S]
#
# The default run (7 points x 2 servers x ~4-5 s) takes about 1-2 minutes.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release -q -p seda-io --example sockets_bench
target="${CARGO_TARGET_DIR:-target}"
exec "$target/release/examples/sockets_bench" "$@"
