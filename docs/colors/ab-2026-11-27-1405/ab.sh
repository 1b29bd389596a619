#!/usr/bin/env bash
# A/B of the colors experiment in one window, 2026-11-27 14:05-14:12 UTC (through
# bench/quiet-run): /tmp/ab/seda.old, `cargo build --release -p seda-cli` of d5fdde7 (the
# build of the 10:33 A/B), against /tmp/ab/seda.new, the same of c64857f; the generator
# without a dwell in both (d5fdde7 has none; --client-dwell-us 0 for c64857f); 6 s rounds.
set -u
echo "start $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
for b in old new new old; do
    extra=""; [ $b = new ] && extra="--client-dwell-us 0"
    echo "== $b $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
    timeout 200 /tmp/ab/seda.$b experiment colors --no-cost --duration-s 6 --out /tmp/ab/out-$b-$RANDOM $extra 2>&1 | grep -E "round|speedup"
done
echo "end $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
