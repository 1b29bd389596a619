#!/usr/bin/env bash
# What the access log costs a request: `seda serve` without a log, with
# `--access-log FILE` (combined) and with `--access-log-format json`, 1 KiB keep-alive
# over loopback (wrk -c100), same run, alternating rounds; requests/s and server CPU
# per request, and each log's lines against the requests wrk counted (the log is fed
# by lossy enqueue: dropped lines are printed too).
# Loopback only; stops by itself (about 2 minutes with the defaults). Takes the
# benchmark lock and waits for a quiet machine (bench/lib.sh); run it alone.
#
# Environment: DURATION (s per run, 5), ROUNDS (3), THREADS (wrk threads, 2),
# SEDA_BIN (use this binary instead of building one).
set -euo pipefail

DURATION=${DURATION:-5}
ROUNDS=${ROUNDS:-3}
THREADS=${THREADS:-2}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
. "$REPO/bench/lib.sh"
bench_lock

WRK=$(bench_need wrk wrk)
bench_seda_bin

bench_workdir seda-access-log-bench
mkdir -p "$WORK/www"
head -c 1024 /dev/urandom >"$WORK/www/1k.bin"

bench_begin access-log
echo "# ${ROUNDS} rounds x ${DURATION} s, wrk -t$THREADS -c100, 1 KiB file, logs on $(df -P "$WORK" | awk 'NR==2 {print $1}')"

declare -A PID ADDR
start_seda() { # name extra-args...
    local name=$1
    shift
    bench_spawn "$SEDA_BIN" serve --listen 127.0.0.1:0 --root "$WORK/www" --event-loops 2 \
        --idle-timeout 65 --max-connections 4096 --admin-listen 127.0.0.1:0 "$@" \
        >"$WORK/$name.out" 2>"$WORK/$name.err"
    PID[$name]=$!
    PIDS+=("$!")
    for _ in $(seq 100); do
        grep -q '^admin at ' "$WORK/$name.out" 2>/dev/null && break
        sleep 0.1
    done
    ADDR[$name]=$(sed -n 's#^listening on http://##p' "$WORK/$name.out")
    [[ -n "${ADDR[$name]}" ]] || {
        echo "$name did not start:"
        cat "$WORK/$name.err"
        exit 1
    }
}
start_seda no-log
start_seda combined --access-log "$WORK/combined.log"
start_seda json --access-log "$WORK/json.log" --access-log-format json
SERVERS=(no-log combined json)

cpu_ticks() {
    local total=0 p
    for p in "$1" $(pgrep -P "$1" || true); do
        [[ -r /proc/$p/stat ]] || continue
        total=$((total + $(awk '{print $14 + $15}' "/proc/$p/stat")))
    done
    echo "$total"
}
TICK=$(getconf CLK_TCK)

declare -A RPS US
for round in $(seq "$ROUNDS"); do
    order=("${SERVERS[@]:$((round % 3))}" "${SERVERS[@]:0:$((round % 3))}")
    for s in "${order[@]}"; do
        url="http://${ADDR[$s]}/1k.bin"
        "$WRK" -t"$THREADS" -c100 -d1s "$url" >/dev/null 2>&1 || true
        before=$(cpu_ticks "${PID[$s]}")
        out=$("$WRK" -t"$THREADS" -c100 -d"${DURATION}s" "$url" 2>&1)
        after=$(cpu_ticks "${PID[$s]}")
        reqs=$(awk '/requests in/ {print $1}' <<<"$out")
        RPS[$s]+="$(awk '/^Requests\/sec:/ {print $2}' <<<"$out") "
        US[$s]+="$(awk -v t=$((after - before)) -v hz="$TICK" -v r="${reqs:-0}" 'BEGIN { if (r > 0) printf "%.2f", t / hz * 1e6 / r; else print "nan" }') "
    done
    echo "round $round done" >&2
done
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END { if (NR == 0) print "nan"; else if (NR % 2) print a[(NR+1)/2]; else printf "%.2f\n", (a[NR/2] + a[NR/2+1]) / 2 }'; }
printf '\n%-9s | %10s %8s | %12s | %8s %8s\n' server "req/s" "us/req" "us/req - no" lines dropped
printf -- '-%.0s' {1..66}
echo
base=$(median <<<"${US[no-log]}")
for s in "${SERVERS[@]}"; do
    u=$(median <<<"${US[$s]}")
    stats=$(curl -s "http://$(sed -n 's#^admin at http://##p' "$WORK/$s.out")stats" || true)
    lines=$(python3 -c 'import json,sys; d=json.loads(sys.stdin.read() or "{}"); a=d.get("access_log") or {}; print(a.get("lines","-"), a.get("dropped","-"))' <<<"$stats")
    printf '%-9s | %10s %8s | %12s | %8s %8s\n' "$s" "$(median <<<"${RPS[$s]}")" "$u" "$(awk -v a="$u" -v b="$base" 'BEGIN { printf "%+.2f", a - b }')" ${lines}
done
echo
echo "# us/req: server CPU (all threads, the log stage's included) per request, median over the rounds; lines/dropped: the access log's counters at the end (every request of every run, warm-ups included)"
