#!/usr/bin/env bash
# SEDA Fig. 11 on loopback: seda-io socket stages (queued handoff, and inline handoff
# in a thread-pool domain) vs a thread-per-connection server, N = 1, 4, 16, ... up to
# --max-clients (default 16384). Builds in release, runs every server at every N in one
# invocation and prints MB/s, the server's CPU per MB, and the ratios to tpc per N.
# The seda servers run once per socket backend of IO (default both: IO=epoll,uring;
# IO=epoll or IO=uring for one), rows `seda/epoll`, `seda/uring`, `inline/epoll`, ...
#
#   [IO=epoll,uring] bench/sockets/run.sh [--min-clients N] [--max-clients N]
#                        [--secs S] [--warmup S] [--only seda,inline,tpc] [--perf]
#
# The default run (8 points x 5 servers x ~5-10 s) takes about 5-8 minutes; it is cut
# off after 20 minutes. The load generator is a child process, so server and
# generator each need one descriptor per connection under the open-files limit
# (raised to the hard limit; 16384 clients need about 16,700). It takes the benchmark
# lock and waits for a quiet machine (bench/lib.sh), and prints the load average.
set -euo pipefail
cd "$(dirname "$0")/../.."
. bench/lib.sh
bench_lock
cargo build --release -q -p seda-io --example sockets_bench
target="${CARGO_TARGET_DIR:-target}"
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
bench_begin sockets
echo "# open-files limit $(ulimit -n)"
timeout 1200 "$target/release/examples/sockets_bench" --max-clients 16384 --io "${IO:-epoll,uring}" "$@"
