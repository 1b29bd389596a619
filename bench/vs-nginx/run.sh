#!/usr/bin/env bash
# Haboob (`seda serve`) against nginx and h2o at their best static setups, and against
# the ceiling (bench/ceiling: a minimal epoll responder with a canned reply), on
# loopback, same files, same machine, alternating rounds in one run.
#
# Serves one directory (1 KiB, 16 KiB and 256 KiB files) from every server with its
# best settings for static files:
#   nginx   worker_processes 2, listen reuseport, open_file_cache max=1000,
#           access_log off, sendfile on, tcp_nopush on, tcp_nodelay on, keep-alive
#           without a request cap;
#   h2o     Debian's h2o, num-threads 2, no access log (none configured), file.dir
#           (h2o keeps its own open-file cache), max-connections 20000;
#   seda    --event-loops 2, --max-connections 10000 (under the usual 20,000 open-files
#           limit), page cache on, inline handoff (and, with QUEUED=1, a
#           second Haboob with --handoff queued), plus EXTRA;
#   ceiling 2 threads, SO_REUSEPORT, one canned response of the file's size.
# With URING=1 two more servers run in the same rounds: Haboob with `--io uring`
# (inline handoff, EXTRA too) and the io_uring ceiling (`ceiling ... uring`); a second
# table then sets them beside the first Haboob (give it EXTRA="--io epoll" to compare
# the backends) and the epoll ceiling.
# For each file and 100 / 1,000 keep-alive connections (wrk -t$THREADS), every round
# runs each server once (a 1 s warm-up, then DURATION s), the order rotating from
# round to round; the table shows the median over ROUNDS of requests per second and
# of the server's CPU time per request (user + system of all its threads or worker
# processes, from /proc/PID/stat), the ratio of seda's requests/s to the better of
# nginx and h2o ("/best", and which one), seda's CPU per request over h2o's
# ("cpu/h2o"), and seda/ceiling; then every round's figures, to show the spread
# (h2o 2.2's threads share one listener, and in some runs one thread accepts every
# connection: its figures are bimodal).
# Loopback only; stops by itself (about 11 minutes with the defaults). It takes the
# benchmark lock and waits for a quiet machine (bench/lib.sh); run it alone.
#
# Environment: DURATION (seconds per run, default 5), ROUNDS (default 3), THREADS
# (wrk threads, 2), QUEUED (1: also Haboob with queued handoff; default 1),
# FILES (default "1k.bin 16k.bin 256k.bin"; 64k.bin also exists), CONNS (default "100 1000"),
# EXTRA (more `seda serve` arguments for every Haboob, e.g. "--io uring"),
# URING (1: also Haboob --io uring and the io_uring ceiling; default 0),
# H2O_THREADS (default 2), CARGO_TARGET_DIR (where to build seda), SEDA_BIN (use this
# binary instead).
set -euo pipefail

DURATION=${DURATION:-5}
ROUNDS=${ROUNDS:-3}
THREADS=${THREADS:-2}
QUEUED=${QUEUED:-1}
FILES=${FILES:-"1k.bin 16k.bin 256k.bin"}
CONNS=${CONNS:-"100 1000"}
# The files the bench can serve, and their sizes; any other name in FILES is refused
# here (a typo would otherwise measure 404s).
size_of() { case "$1" in 1k.bin) echo 1024 ;; 16k.bin) echo 16384 ;; 64k.bin) echo 65536 ;; 256k.bin) echo 262144 ;; *) return 1 ;; esac; }
for f in $FILES; do
    size_of "$f" >/dev/null || { echo "run.sh: unknown file '$f' in FILES (known: 1k.bin 16k.bin 64k.bin 256k.bin)" >&2; exit 2; }
done
EXTRA=${EXTRA:-}
URING=${URING:-0}
H2O_THREADS=${H2O_THREADS:-2}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
. "$REPO/bench/lib.sh"
bench_lock # before installing and building: they would disturb another benchmark

WRK=$(bench_need wrk wrk)
NGINX=$(bench_need nginx nginx)
H2O=$(bench_need h2o h2o)

bench_seda_bin
(cd "$REPO/bench/ceiling" && cargo build --release -q)
CEILING_BIN="$REPO/bench/ceiling/target/release/ceiling"

bench_workdir seda-vs-nginx
bench_begin vs-nginx
echo "# ${ROUNDS} rounds x ${DURATION} s, wrk -t$THREADS, files: $FILES, connections: $CONNS, QUEUED=$QUEUED, URING=$URING, EXTRA='$EXTRA', $($NGINX -v 2>&1 | sed 's/.*: //'), $($H2O --version 2>&1 | head -1), h2o threads $H2O_THREADS"

mkdir -p "$WORK/www" "$WORK/nginx/logs"
chmod 755 "$WORK" # nginx workers run as an unprivileged user
for f in $FILES; do
    head -c "$(size_of $f)" /dev/urandom >"$WORK/www/$f"
done
chmod -R a+rX "$WORK/www"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
NGINX_PORT=$(free_port)
cat >"$WORK/nginx/nginx.conf" <<CONF
worker_processes 2;
daemon off;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/logs/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    sendfile on;
    tcp_nopush on;
    tcp_nodelay on;
    open_file_cache max=1000 inactive=60s;
    open_file_cache_valid 60s;
    keepalive_timeout 65;
    keepalive_requests 100000000;
    default_type application/octet-stream;
    client_body_temp_path $WORK/nginx/body;
    proxy_temp_path $WORK/nginx/proxy;
    fastcgi_temp_path $WORK/nginx/fastcgi;
    uwsgi_temp_path $WORK/nginx/uwsgi;
    scgi_temp_path $WORK/nginx/scgi;
    server {
        listen 127.0.0.1:$NGINX_PORT reuseport;
        root $WORK/www;
    }
}
CONF
bench_spawn "$NGINX" -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf"
NGINX_PID=$!
PIDS+=("$NGINX_PID")

# h2o: one process, H2O_THREADS threads sharing one listener; no access-log
# directive, so no access log. As root it must drop to a user (nobody).
H2O_PORT=$(free_port)
mkdir -p "$WORK/h2o"
{
    echo "num-threads: $H2O_THREADS"
    echo "max-connections: 20000"
    echo "error-log: $WORK/h2o/error.log"
    [[ $(id -u) == 0 ]] && echo "user: nobody"
    cat <<CONF
listen:
  host: 127.0.0.1
  port: $H2O_PORT
hosts:
  default:
    paths:
      /:
        file.dir: $WORK/www
CONF
} >"$WORK/h2o/h2o.conf"
bench_spawn "$H2O" -c "$WORK/h2o/h2o.conf" >"$WORK/h2o/out" 2>&1
H2O_PID=$!
PIDS+=("$H2O_PID")

# start_listening NAME CMD... : runs CMD, waits for its `listening on http://ADDR`
# line; sets LAST_PID and LAST_ADDR.
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
    [[ -n "$LAST_ADDR" ]] || {
        echo "$name did not start:"
        cat "$WORK/$name.err"
        exit 1
    }
}

SEDA_ARGS=(serve --listen 127.0.0.1:0 --root "$WORK/www" --event-loops 2 --idle-timeout 65
    --max-connections 10000 --admin-listen none)
# shellcheck disable=SC2206 # EXTRA is a list of words
SEDA_ARGS+=($EXTRA)
start_listening seda "$SEDA_BIN" "${SEDA_ARGS[@]}" --handoff inline
declare -A PID ADDR
PID[seda]=$LAST_PID
ADDR[seda]=$LAST_ADDR
SERVERS=(nginx h2o seda)
if [[ "$QUEUED" == 1 ]]; then
    start_listening seda-queued "$SEDA_BIN" "${SEDA_ARGS[@]}" --handoff queued
    PID[seda-queued]=$LAST_PID
    ADDR[seda-queued]=$LAST_ADDR
    SERVERS+=(seda-queued)
fi
if [[ "$URING" == 1 ]]; then
    # EXTRA's own `--io X`, if any, is for the first Haboob only.
    URING_ARGS=()
    skip=0
    for a in "${SEDA_ARGS[@]}"; do
        if [[ $skip == 1 ]]; then
            skip=0
        elif [[ $a == --io ]]; then
            skip=1
        elif [[ $a != --io=* ]]; then
            URING_ARGS+=("$a")
        fi
    done
    start_listening seda-uring "$SEDA_BIN" "${URING_ARGS[@]}" --io uring --handoff inline
    grep -q 'socket I/O: uring' "$WORK/seda-uring.err" || {
        echo "seda --io uring does not run io_uring:"
        cat "$WORK/seda-uring.err"
        exit 1
    }
    PID[seda-uring]=$LAST_PID
    ADDR[seda-uring]=$LAST_ADDR
    SERVERS+=(seda-uring)
fi
for f in $FILES; do
    start_listening "ceiling-$f" "$CEILING_BIN" 127.0.0.1:0 2 "$(size_of "$f")"
    PID[ceiling-$f]=$LAST_PID
    ADDR[ceiling-$f]=$LAST_ADDR
    if [[ "$URING" == 1 ]]; then
        start_listening "ceiling-uring-$f" "$CEILING_BIN" 127.0.0.1:0 2 "$(size_of "$f")" uring
        PID[ceiling-uring-$f]=$LAST_PID
        ADDR[ceiling-uring-$f]=$LAST_ADDR
    fi
done
SERVERS+=(ceiling)
[[ "$URING" == 1 ]] && SERVERS+=(ceiling-uring)
PID[nginx]=$NGINX_PID
ADDR[nginx]=127.0.0.1:$NGINX_PORT
PID[h2o]=$H2O_PID
ADDR[h2o]=127.0.0.1:$H2O_PORT
first=${FILES%% *}
for s in nginx h2o; do
    for _ in $(seq 100); do
        curl -sf -o /dev/null "http://${ADDR[$s]}/$first" && break
        sleep 0.1
    done
    curl -sf -o /dev/null "http://${ADDR[$s]}/$first" || {
        echo "$s did not start:"
        cat "$WORK/nginx/logs/error.log" "$WORK/h2o/out" "$WORK/h2o/error.log" 2>/dev/null
        exit 1
    }
done

# CPU time (user+system, clock ticks) of a process and its child processes (nginx
# workers); /proc/PID/stat counts all threads of a process (h2o's, Haboob's).
cpu_ticks() {
    local total=0 p
    for p in "$1" $(pgrep -P "$1" || true); do
        [[ -r /proc/$p/stat ]] || continue
        total=$((total + $(awk '{print $14 + $15}' "/proc/$p/stat")))
    done
    echo "$total"
}
TICK=$(getconf CLK_TCK)

# measure PID URL CONNS -> prints "rps us_per_req errors"
measure() {
    local pid=$1 url=$2 conns=$3 before after out rps reqs errs us
    "$WRK" -t"$THREADS" -c"$conns" -d1s "$url" >/dev/null 2>&1 || true
    before=$(cpu_ticks "$pid")
    out=$("$WRK" -t"$THREADS" -c"$conns" -d"${DURATION}s" "$url" 2>&1)
    after=$(cpu_ticks "$pid")
    rps=$(awk '/^Requests\/sec:/ {print $2}' <<<"$out")
    reqs=$(awk '/requests in/ {print $1}' <<<"$out")
    errs=$(awk '/Non-2xx/ {n+=$NF} /Socket errors/ {gsub(",","");  for(i=1;i<=NF;i++) if ($i ~ /^[0-9]+$/) n+=$i} END {print n+0}' <<<"$out")
    us=$(awk -v t=$((after - before)) -v hz="$TICK" -v r="${reqs:-0}" 'BEGIN { if (r > 0) printf "%.2f", t / hz * 1e6 / r; else print "nan" }')
    echo "${rps:-0} $us $errs"
}

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END { if (NR == 0) print "nan"; else if (NR % 2) print a[(NR+1)/2]; else printf "%.2f\n", (a[NR/2] + a[NR/2+1]) / 2 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "nan" }'; }

declare -A RPS US ERR
for round in $(seq "$ROUNDS"); do
    # Rotate the order of the servers from round to round.
    order=("${SERVERS[@]:$(((round - 1) % ${#SERVERS[@]}))}" "${SERVERS[@]:0:$(((round - 1) % ${#SERVERS[@]}))}")
    for f in $FILES; do
        for c in $CONNS; do
            for s in "${order[@]}"; do
                key=$s
                [[ $s == ceiling || $s == ceiling-uring ]] && key=$s-$f
                read -r rps us errs <<<"$(measure "${PID[$key]}" "http://${ADDR[$key]}/$f" "$c")"
                RPS[$s,$f,$c]+="$rps "
                US[$s,$f,$c]+="$us "
                ERR[$s,$f,$c]=$((${ERR[$s,$f,$c]:-0} + errs))
            done
            echo "round $round $f c$c done" >&2
        done
    done
done

best_of() { awk -v n="$1" -v h="$2" 'BEGIN { if (h > n) print "h2o"; else print "nginx" }'; }
printf '\n%-8s %5s | %9s %6s | %9s %6s | %9s %6s | %5s %5s %7s | %9s %6s | %6s' file conns \
    "nginx r/s" "us/req" "h2o r/s" "us/req" "seda r/s" "us/req" "/best" "best" "cpu/h2o" \
    "ceil r/s" "us/req" "/ceil"
[[ "$QUEUED" == 1 ]] && printf ' | %9s %6s %6s' "queued r/s" "us/req" "/best"
echo
printf -- '-%.0s' {1..135}
echo
for f in $FILES; do
    for c in $CONNS; do
        for s in "${SERVERS[@]}"; do
            declare "r_${s//-/_}=$(median <<<"${RPS[$s,$f,$c]}")"
            declare "u_${s//-/_}=$(median <<<"${US[$s,$f,$c]}")"
        done
        best=$(best_of "$r_nginx" "$r_h2o")
        r_best=$r_nginx
        [[ $best == h2o ]] && r_best=$r_h2o
        printf '%-8s %5s | %9.0f %6s | %9.0f %6s | %9.0f %6s | %4sx %5s %6sx | %9.0f %6s | %5sx' "$f" "$c" \
            "$r_nginx" "$u_nginx" "$r_h2o" "$u_h2o" "$r_seda" "$u_seda" \
            "$(ratio "$r_seda" "$r_best")" "$best" "$(ratio "$u_seda" "$u_h2o")" \
            "$r_ceiling" "$u_ceiling" "$(ratio "$r_seda" "$r_ceiling")"
        [[ "$QUEUED" == 1 ]] && printf ' | %9.0f %6s %5sx' "$r_seda_queued" "$u_seda_queued" "$(ratio "$r_seda_queued" "$r_best")"
        errs=""
        for s in "${SERVERS[@]}"; do
            [[ "${ERR[$s,$f,$c]:-0}" != 0 ]] && errs+=" $s:${ERR[$s,$f,$c]}"
        done
        [[ -n "$errs" ]] && printf '  (errors:%s)' "$errs"
        echo
    done
done
echo
echo "r/s: median requests per second over $ROUNDS rounds; us/req: median server CPU time"
echo "(user+system, all threads/workers) per request; /best: seda r/s over the better of"
echo "nginx and h2o (named under best); cpu/h2o: seda us/req over h2o's; /ceil: seda r/s"
echo "over the ceiling's. wrk shares the same cores."
echo
if [[ "$URING" == 1 ]]; then
    printf '%-8s %5s | %9s %6s | %5s %7s %7s | %9s %6s | %6s %8s' file conns "uring r/s" "us/req" "/best" \
        "/seda" "cpu/seda" "ceil-u r/s" "us/req" "/ceil-u" "cpu u/e"
    echo
    printf -- '-%.0s' {1..100}
    echo
    for f in $FILES; do
        for c in $CONNS; do
            for s in nginx h2o seda seda-uring ceiling ceiling-uring; do
                declare "r_${s//-/_}=$(median <<<"${RPS[$s,$f,$c]}")"
                declare "u_${s//-/_}=$(median <<<"${US[$s,$f,$c]}")"
            done
            r_best=$r_nginx
            [[ $(best_of "$r_nginx" "$r_h2o") == h2o ]] && r_best=$r_h2o
            printf '%-8s %5s | %9.0f %6s | %4sx %6sx %6sx | %9.0f %6s | %5sx %7sx\n' "$f" "$c" \
                "$r_seda_uring" "$u_seda_uring" "$(ratio "$r_seda_uring" "$r_best")" \
                "$(ratio "$r_seda_uring" "$r_seda")" "$(ratio "$u_seda_uring" "$u_seda")" \
                "$r_ceiling_uring" "$u_ceiling_uring" "$(ratio "$r_seda_uring" "$r_ceiling_uring")" \
                "$(ratio "$u_ceiling_uring" "$u_ceiling")"
        done
    done
    echo
    echo "uring: Haboob --io uring (inline handoff); /best: its r/s over the better of nginx"
    echo "and h2o; /seda and cpu/seda: its r/s and us/req over the first Haboob's (EXTRA);"
    echo "ceil-u: the io_uring ceiling; /ceil-u: Haboob uring r/s over it; cpu u/e: the"
    echo "io_uring ceiling's us/req over the epoll ceiling's."
    echo
fi
echo "Every round (requests/s, then us/req; the servers' order rotates from round to round):"
for f in $FILES; do
    for c in $CONNS; do
        for s in "${SERVERS[@]}"; do
            printf '%-8s %5s %-12s %s| %s\n' "$f" "$c" "$s" \
                "$(printf '%9.0f ' ${RPS[$s,$f,$c]})" "$(printf '%6s ' ${US[$s,$f,$c]})"
        done
    done
done
