#!/usr/bin/env bash
# Instructions per event of the pipeline bench's pipelines, under callgrind
# (user-space instructions, all threads; repeatable on a loaded machine, unlike
# wall-clock figures).
#
# For each configuration it runs `SEDA_BENCH_COUNT=N` (push N events once, see
# crates/seda/benches/pipeline.rs) for two N and prints (Ir(N2) - Ir(N1)) / (N2 - N1):
# the cost of one more event through the whole pipeline (source, stages, the
# output channel, the consumer), set-up and teardown cancelled out; and the same
# divided by the stages ("per hop").
#
# Usage: bench/callgrind/hops.sh [CONFIG...]   (default: crossbeam and all ten; the
# -colors64 ones give event i the color i % 64, against -each of the same model)
# Environment: STAGES (default 5), N1 (2000), N2 (12000), KEEP (a directory to keep
# the callgrind.out files in, for callgrind_annotate). It takes the benchmark lock
# (bench/lib.sh) but does not wait for a quiet machine.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
. "$REPO/bench/lib.sh"
bench_lock
VALGRIND=$(bench_need valgrind valgrind)
STAGES=${STAGES:-5}
N1=${N1:-2000}
N2=${N2:-12000}
CONFIGS=("$@")
if [[ ${#CONFIGS[@]} -eq 0 ]]; then
    CONFIGS=(crossbeam seda-per-stage-each seda-per-stage-batch seda-shared-each
        seda-shared-batch seda-per-stage-each-inline seda-per-stage-batch-inline
        seda-shared-each-inline seda-shared-batch-inline seda-per-stage-each-colors64
        seda-shared-each-colors64)
fi
(cd "$REPO" && cargo bench -p seda --bench pipeline --no-run -q 2>/dev/null)
BIN=$REPO/$(cd "$REPO" && cargo bench -p seda --bench pipeline --no-run 2>&1 |
    sed -n 's/.*Executable .*(\(.*\)).*/\1/p' | tail -1)
OUT=${KEEP:-$(mktemp -d -t seda-cg-hops.XXXXXX)}
mkdir -p "$OUT"
[[ -n "${KEEP:-}" ]] || bench_at_exit 'rm -rf "$OUT"'
bench_begin --any-load callgrind/hops
ir() { # config n -> total Ir
    local f="$OUT/callgrind.out.$1.$2"
    SEDA_BENCH_ONLY=$1 SEDA_BENCH_COUNT=$2 SEDA_BENCH_STAGES=$STAGES \
        timeout 600 "$VALGRIND" --tool=callgrind --callgrind-out-file="$f" "$BIN" >/dev/null 2>"$f.log"
    sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$f.log"
}
echo "instructions per event, $STAGES stages, N = $N1 and $N2 (callgrind)"
printf '%-30s %12s %12s\n' config "Ir/event" "Ir/hop"
for c in "${CONFIGS[@]}"; do
    a=$(ir "$c" "$N1")
    b=$(ir "$c" "$N2")
    python3 -c "d=($b-$a)/($N2-$N1); print('%-30s %12.0f %12.0f' % ('$c', d, d/$STAGES))"
done
