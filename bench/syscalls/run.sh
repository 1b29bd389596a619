#!/usr/bin/env bash
# System calls per request (issue 24): Haboob (`seda serve`) on each socket backend and
# both canned-reply ceilings (bench/ceiling, epoll and io_uring), 1 KiB keep-alive GETs
# from wrk at each connection count, on loopback.
#
# For each server and connection count: a 1 s wrk warm-up, then DURATION s of wrk
# while `perf stat` counts, in the server's process only, every system call entered
# (raw_syscalls:sys_enter), the io_uring operations submitted
# (io_uring:io_uring_submit_req) and the completions posted (io_uring:io_uring_complete).
# Printed per request: system calls, io_uring operations and completions. Counts,
# not times; but how many requests share a loop's turn (one epoll_wait or one
# io_uring_enter) depends on timing, so it runs under the benchmark lock on a quiet
# machine (about 30 s with the defaults).
#
# Environment: DURATION (seconds, default 3), CONNS (default "100 1000"), THREADS (wrk
# threads, 2), SEDA_BIN (use this binary instead of building seda-cli in release).
set -euo pipefail
DURATION=${DURATION:-3}
CONNS=${CONNS:-"100 1000"}
THREADS=${THREADS:-2}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
. "$REPO/bench/lib.sh"
bench_lock
WRK=$(bench_need wrk wrk)
PERF=$(command -v perf) || { echo "run.sh: needs perf (linux-perf)" >&2; exit 2; }
bench_seda_bin
(cd "$REPO/bench/ceiling" && cargo build --release -q)
CEILING_BIN="$REPO/bench/ceiling/target/release/ceiling"
bench_workdir seda-syscalls
bench_begin syscalls
EVENTS=raw_syscalls:sys_enter,io_uring:io_uring_submit_req,io_uring:io_uring_complete
"$PERF" stat -x, -e "$EVENTS" -- true >/dev/null 2>&1 || {
    echo "run.sh: perf cannot count $EVENTS here (perf_event_paranoid, tracefs?)" >&2
    exit 2
}
echo "# wrk -t$THREADS, ${DURATION} s per run, 1 KiB file, connections: $CONNS"
mkdir -p "$WORK/www"
head -c 1024 /dev/urandom >"$WORK/www/1k.bin"

start_listening() {
    local name=$1
    shift
    bench_spawn "$@" >"$WORK/$name.out" 2>"$WORK/$name.err"
    LAST_PID=$!
    PIDS+=("$LAST_PID")
    for _ in $(seq 100); do
        grep -q '^listening on ' "$WORK/$name.out" 2>/dev/null && break
        sleep 0.1
    done
    LAST_ADDR=$(sed -n 's#^listening on http://##p' "$WORK/$name.out")
    [[ -n "$LAST_ADDR" ]] || { echo "$name did not start:"; cat "$WORK/$name.err"; exit 1; }
}
declare -A PID ADDR
SERVERS=(seda-epoll seda-uring ceiling-epoll ceiling-uring)
for io in epoll uring; do
    start_listening "seda-$io" "$SEDA_BIN" serve --listen 127.0.0.1:0 --root "$WORK/www" \
        --event-loops 2 --idle-timeout 65 --max-connections 10000 --admin-listen none \
        --handoff inline --io "$io"
    grep -q "socket I/O: $io" "$WORK/seda-$io.err" || { echo "seda --io $io runs something else:"; cat "$WORK/seda-$io.err"; exit 1; }
    PID[seda-$io]=$LAST_PID
    ADDR[seda-$io]=$LAST_ADDR
    start_listening "ceiling-$io" "$CEILING_BIN" 127.0.0.1:0 2 1024 "$io"
    PID[ceiling-$io]=$LAST_PID
    ADDR[ceiling-$io]=$LAST_ADDR
done

printf '%-14s %5s | %9s | %9s %9s %9s\n' server conns "r/s" "sys/req" "sqe/req" "cqe/req"
printf -- '-%.0s' {1..66}
echo
for c in $CONNS; do
    for s in "${SERVERS[@]}"; do
        url="http://${ADDR[$s]}/1k.bin"
        "$WRK" -t"$THREADS" -c"$c" -d1s "$url" >/dev/null 2>&1 || true
        "$PERF" stat -x, -e "$EVENTS" -o "$WORK/perf" -p "${PID[$s]}" -- sleep "$DURATION" &
        perf_pid=$!
        out=$("$WRK" -t"$THREADS" -c"$c" -d"${DURATION}s" "$url" 2>&1)
        wait "$perf_pid"
        reqs=$(awk '/requests in/ {print $1}' <<<"$out")
        rps=$(awk '/^Requests\/sec:/ {print $2}' <<<"$out")
        count() { awk -F, -v e="$1" '$3 == e {print $1}' "$WORK/perf"; }
        per() { awk -v n="$1" -v r="$reqs" 'BEGIN { if (r > 0 && n ~ /^[0-9]+$/) printf "%.3f", n / r; else print "nan" }'; }
        printf '%-14s %5s | %9.0f | %9s %9s %9s\n' "$s" "$c" "$rps" \
            "$(per "$(count raw_syscalls:sys_enter)")" \
            "$(per "$(count io_uring:io_uring_submit_req)")" \
            "$(per "$(count io_uring:io_uring_complete)")"
    done
done
echo
echo "sys/req: system calls the server's threads entered per request (wrk's requests"
echo "in the same ${DURATION} s; perf counts over a sleep of the same length beside it);"
echo "sqe/req: io_uring operations submitted; cqe/req: completions posted."
