#!/usr/bin/env bash
# Rerun `seda experiment proxy` (issue 26, item 3): `seda serve --proxy` with only a p90
# target in front of gunicorn (sync workers, bench/proxy/app.py) against nginx
# proxy_pass, nginx limit_req + limit_conn and HAProxy maxconn + timeout queue, under a
# closed-loop spike, open loops at 1.5x/3x/10x the capacity and half the workers lost
# mid-run; the runtime's other admission policies at 3x; two classes at 3x. Writes
# docs/proxy/full (about 100 minutes), with --medium docs/proxy/medium (about 26
# minutes) or with --quick docs/proxy/quick (about nine minutes).
# Extra arguments go to `seda experiment proxy` (e.g. --shapes drop --fronts
# seda,haproxy, --repeats 1). OUT=DIR writes DIR instead (a new folder per run).
#
# It needs the whole machine: it takes the benchmark lock and waits for a quiet
# machine (bench/lib.sh), and prints the load average, which the results record too.
set -euo pipefail
cd "$(dirname "$0")/../.."
. bench/lib.sh
bench_lock
if [ -z "${OUT:-}" ]; then
    OUT=docs/proxy/full
    for a in "$@"; do
        case $a in
            --quick) OUT=docs/proxy/quick ;;
            --medium) OUT=docs/proxy/medium ;;
        esac
    done
fi
GUNICORN=$(bench/proxy/install.sh)
bench_need nginx nginx >/dev/null
bench_need haproxy haproxy >/dev/null
bench_seda_bin
bench_begin proxy
"$SEDA_BIN" experiment proxy --gunicorn "$GUNICORN" --app-dir bench/proxy --out "$OUT" "$@"
