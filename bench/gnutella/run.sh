#!/usr/bin/env bash
# Rerun the Gnutella experiments and write the results where the committed ones live:
#   fig14       SEDA Fig. 14, the router with a 20 ms query cost, one router thread vs
#               the thread-pool controller (~6 min): docs/gnutella/fig14
#   throughput  messages routed per second by the staged router vs a plain forwarding
#               loop without stages, same generator, same process (~1.5 min):
#               docs/gnutella/throughput
#
#   bench/gnutella/run.sh [fig14|throughput] [ARGS...]   (default: both, no ARGS)
#
# ARGS go to `seda experiment gnutella` or `seda experiment gnutella-throughput`.
# It takes the benchmark lock and waits for a quiet machine before each experiment
# (bench/lib.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
. bench/lib.sh
which=(fig14 throughput)
if [[ $# -gt 0 ]]; then
    case $1 in
    fig14 | throughput) which=("$1") && shift ;;
    *) echo "usage: bench/gnutella/run.sh [fig14|throughput] [ARGS...]" >&2 && exit 2 ;;
    esac
fi
bench_lock
cargo build --release -p seda-cli
target="${CARGO_TARGET_DIR:-target}"
for w in "${which[@]}"; do
    case $w in
    fig14) cmd=(experiment gnutella --out docs/gnutella/fig14) ;;
    throughput) cmd=(experiment gnutella-throughput --out docs/gnutella/throughput) ;;
    esac
    bench_begin "gnutella/$w"
    "$target/release/seda" "${cmd[@]}" "$@"
done
