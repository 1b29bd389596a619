#!/usr/bin/env bash
# A/B of the colors experiment in one window: main's binary, then the branch's.
# /tmp/cgc/seda.main: `cargo build --release -p seda-cli` of main d5fdde7; /tmp/cgc/seda.new:
# the same of branch reliab-runhere-wip (a handed-over colored event runs on the
# releasing shared worker). Run 2026-11-27 10:33-10:38 UTC in one bench window.
set -euo pipefail
cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
echo "start $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
for b in main new; do
    echo "== $b $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
    timeout 200 /tmp/cgc/seda.$b experiment colors --no-cost --out /tmp/cgc/ab/$b 2>&1 | tail -25
done
echo "end $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
