#!/usr/bin/env bash
# A/B of the generator's settings in one benchmark window, one binary (branch
# reliab with the dwell): the defaults (4 reads outstanding per connection, dwell
# 100 us), then 8 reads outstanding with a 250 us dwell.
# `seda experiment colors --no-cost`, 3 rounds of 10 s each.
set -uo pipefail
echo "start $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
for cfg in "4 100" "8 250"; do
    set -- $cfg
    echo "== depth $1 dwell $2 $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
    timeout 210 /tmp/colors-ab2/seda experiment colors --no-cost --depth $1 --client-dwell-us $2 --out /tmp/colors-ab2/depth$1-dwell$2 2>&1 | tail -3
done
echo "end $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
