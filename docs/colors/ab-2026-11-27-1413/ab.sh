#!/usr/bin/env bash
# A/B of the generator's dwell in one window, 2026-11-27 14:13-14:20 UTC (through bench/quiet-run):
# /tmp/ab/seda.new, the release build of c64857f, `seda experiment colors --no-cost --duration-s 6` with
# --client-dwell-us 0, 100, 100, 0.
set -u
echo "start $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
for d in 0 100 100 0; do
    echo "== dwell $d $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
    timeout 200 /tmp/ab/seda.new experiment colors --no-cost --duration-s 6 --client-dwell-us $d --out /tmp/ab2/out-dwell$d-$(date -u +%H%M%S) 2>&1 | grep -E "round|speedup"
done
echo "end $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
