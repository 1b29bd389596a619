#!/usr/bin/env bash
# Runs the fuzz targets of seda-http's protocol layer for a bounded time each.
#
#   fuzz/run.sh [SECONDS] [TARGET...]     (default: 60 s, every target)
#
# Each target starts from its committed corpus (fuzz/corpus/TARGET, read only) and
# its dictionary (fuzz/dict/TARGET.dict); new inputs go to fuzz/scratch/TARGET, crashes
# to fuzz/artifacts/TARGET. cargo-fuzz's default build: optimised, with debug
# assertions, overflow checks and AddressSanitizer (httparse has unsafe SIMD code). Prints
# one line per target (executions, seconds, result) and exits non-zero if any target
# crashed or failed to run. Needs nightly and cargo-fuzz (`cargo install cargo-fuzz`).
# An input running longer than FUZZ_TIMEOUT seconds (default 60: wall-clock time,
# and a niced fuzzer on a loaded machine can stall for seconds) counts as a hang.
# Fuzzing measures no time, so on a shared machine run it niced: `nice -n 10 fuzz/run.sh 600`.
set -uo pipefail

cd "$(dirname "$0")/.."
secs=${1:-60}
shift || true
if ! [[ $secs =~ ^[1-9][0-9]*$ ]]; then
    echo "usage: fuzz/run.sh [SECONDS] [TARGET...] (SECONDS a positive integer, got '$secs')" >&2
    exit 2
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "fuzz/run.sh: needs nightly and cargo-fuzz: rustup toolchain install nightly && cargo install cargo-fuzz" >&2
    exit 2
fi
all=$(cd fuzz && cargo +nightly fuzz list)
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    read -r -a targets <<<"$(echo $all)"
fi
for t in "${targets[@]}"; do
    if ! grep -qx "$t" <<<"$all"; then
        echo "fuzz/run.sh: no target '$t' (targets: $(echo $all))" >&2
        exit 2
    fi
done

mkdir -p fuzz/scratch
# Build once, then run the binaries themselves: `cargo fuzz run` would rebuild (and
# fail the run) if the tree is edited while the targets run.
if ! (cd fuzz && cargo +nightly fuzz build) >fuzz/scratch/build.log 2>&1; then
    tail -20 fuzz/scratch/build.log >&2
    echo "fuzz/run.sh: build failed (fuzz/scratch/build.log)" >&2
    exit 1
fi
bin=fuzz/target/$(rustc +nightly -vV | sed -n 's/^host: //p')/release

failed=0
summary=()
for t in "${targets[@]}"; do
    scratch=fuzz/scratch/$t
    mkdir -p "$scratch" "fuzz/artifacts/$t"
    log=fuzz/scratch/$t.log
    dict=()
    [ -f "fuzz/dict/$t.dict" ] && dict=(-dict="dict/$t.dict")
    echo "== $t: $secs s" >&2
    start=$(date +%s)
    (cd fuzz && "../$bin/$t" -artifact_prefix="artifacts/$t/" \
        -max_total_time="$secs" -timeout="${FUZZ_TIMEOUT:-60}" -rss_limit_mb=2048 -print_final_stats=1 \
        "${dict[@]}" "scratch/$t" "corpus/$t") >"$log" 2>&1
    rc=$?
    took=$(($(date +%s) - start))
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*')
    units=$(grep -o 'corp: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*')
    if [ $rc -eq 0 ]; then
        result=clean
    else
        result="CRASH (exit $rc; see $log and fuzz/artifacts/$t)"
        failed=1
        grep -m1 -A3 "panicked at\|ERROR: libFuzzer\|SUMMARY" "$log" >&2
    fi
    summary+=("$(printf '%-13s %12s execs %6s s  %8s exec/s  cov %5s  corpus %5s  %s' \
        "$t" "${execs:-?}" "$took" "$(( ${execs:-0} / (took > 0 ? took : 1) ))" "${cov:-?}" "${units:-?}" "$result")")
done
printf '%s\n' "${summary[@]}"
exit $failed
