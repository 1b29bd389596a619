#!/usr/bin/env bash
# A/B of the generator's dwell in one benchmark window, one binary (branch reliab,
# the dwell commit): --client-dwell-us 0 (woken by every arrival, as before) then
# the default 100 us. `seda experiment colors --no-cost`, 3 rounds of 10 s each.
set -uo pipefail
echo "start $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
for d in 0 100; do
    echo "== dwell $d $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
    timeout 210 /tmp/colors-ab/seda experiment colors --no-cost --client-dwell-us $d --out /tmp/colors-ab/dwell$d 2>&1 | tail -4
done
echo "end $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
