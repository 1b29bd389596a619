#!/usr/bin/env bash
# Instructions per colored event against an uncolored one, under callgrind
# (user-space instructions, all threads; repeatable on a loaded machine, unlike
# wall-clock figures): crates/seda-experiments/examples/colors_cost.rs pushes events
# through a pipeline of trivial stages (see seda_experiments::colors::cost), each
# kind (uncolored, one-color, colors64: event i has color i % 64) for two counts;
# it prints (Ir(N2) - Ir(N1)) / (1.1 (N2 - N1)) (each run pushes a tenth more as
# warm-up), set-up and teardown cancelled out, and the ratio to uncolored.
#
# Usage: bench/callgrind/colors.sh [STAGES [MODEL]]   (default: 1 per-stage, the
# figure of issue 23.3: one stage on its own thread)
# Environment: N1 (20000), N2 (60000), BIN (a colors_cost binary to measure instead
# of building this tree's, e.g. an older build for a before/after), KEEP (a directory
# to keep the callgrind.out files in, for callgrind_annotate). It takes the benchmark
# lock (bench/lib.sh) but does not wait for a quiet machine.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
. "$REPO/bench/lib.sh"
bench_lock
VALGRIND=$(bench_need valgrind valgrind)
STAGES=${1:-1}
MODEL=${2:-per-stage}
N1=${N1:-20000}
N2=${N2:-60000}
if [[ -z "${BIN:-}" ]]; then
    (cd "$REPO" && cargo build --release -q -p seda-experiments --example colors_cost)
    BIN=${CARGO_TARGET_DIR:-$REPO/target}/release/examples/colors_cost
fi
OUT=${KEEP:-$(mktemp -d -t seda-cg-colors.XXXXXX)}
mkdir -p "$OUT"
[[ -n "${KEEP:-}" ]] || bench_at_exit 'rm -rf "$OUT"'
bench_begin --any-load callgrind/colors
ir() { # kind n -> total Ir
    local f="$OUT/callgrind.out.$1.$2"
    timeout 900 "$VALGRIND" --tool=callgrind --callgrind-out-file="$f" \
        "$BIN" "$1" "$STAGES" "$MODEL" "$2" >/dev/null 2>"$f.log"
    sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$f.log"
}
echo "instructions per event, $STAGES stage(s), $MODEL, N = $N1 and $N2 (callgrind)"
printf '%-12s %12s %12s %8s\n' kind "Ir/event" "Ir/hop" "ratio"
base=
for k in uncolored one-color colors64; do
    a=$(ir "$k" "$N1")
    b=$(ir "$k" "$N2")
    d=$(python3 -c "print(($b-$a)/(1.1*($N2-$N1)))")
    [[ -n "$base" ]] || base=$d
    python3 -c "print('%-12s %12.0f %12.0f %7.2fx' % ('$k', $d, $d/$STAGES, $d/$base))"
done
