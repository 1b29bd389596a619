#!/usr/bin/env bash
# The front door's overhead (issue 26, item 4): `seda serve --proxy` against nginx's
# `proxy_pass` with upstream keep-alive, both in front of the same fast upstream (an
# nginx serving a 1 KiB file), same machine, alternating rounds in one run.
#
#   upstream  nginx, worker_processes 1, the file from its open-file cache, keep-alive
#             without a request cap;
#   nginx     worker_processes 2, reuseport, `proxy_pass` to an `upstream` block with
#             `keepalive 256`, `proxy_http_version 1.1`, `Connection ""` (nginx's
#             documented keep-alive to upstreams), access_log off;
#   seda      `seda serve --proxy /=http://UPSTREAM --event-loops 2` (no admission
#             policy: overhead only), admin listener off.
# For 100 and 1,000 keep-alive client connections (wrk -t$THREADS), every round runs
# each front once (a 1 s warm-up, then DURATION s), the order alternating; the table
# shows the median over ROUNDS of requests per second and of the *front's* CPU time
# per request (user + system of its processes, from /proc/PID/stat; the upstream's is
# not counted), and seda's requests/s over nginx's.
# Loopback only; stops by itself (about 2 minutes with the defaults). It takes the
# benchmark lock and waits for a quiet machine (bench/lib.sh); run it alone.
#
# Environment: DURATION (seconds per run, default 5), ROUNDS (default 3), THREADS
# (wrk threads, 2), CONNS (default "100 1000"), EXTRA (more `seda serve` arguments),
# SEDA_BIN (use this binary instead of building one).
set -euo pipefail

DURATION=${DURATION:-5}
ROUNDS=${ROUNDS:-3}
THREADS=${THREADS:-2}
CONNS=${CONNS:-"100 1000"}
EXTRA=${EXTRA:-}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
. "$REPO/bench/lib.sh"
bench_lock

WRK=$(bench_need wrk wrk)
NGINX=$(bench_need nginx nginx)

bench_seda_bin

bench_workdir seda-proxy-overhead
bench_begin proxy-overhead
echo "# ${ROUNDS} rounds x ${DURATION} s, wrk -t$THREADS, 1 KiB file, connections: $CONNS, EXTRA='$EXTRA', $($NGINX -v 2>&1 | sed 's/.*: //')"

mkdir -p "$WORK/www" "$WORK/up/logs" "$WORK/front/logs"
chmod 755 "$WORK"
head -c 1024 /dev/urandom >"$WORK/www/1k.bin"
chmod -R a+rX "$WORK/www"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
UP_PORT=$(free_port)
FRONT_PORT=$(free_port)
temp_paths() {
    cat <<CONF
    client_body_temp_path $1/body;
    proxy_temp_path $1/proxy;
    fastcgi_temp_path $1/fastcgi;
    uwsgi_temp_path $1/uwsgi;
    scgi_temp_path $1/scgi;
CONF
}
cat >"$WORK/up/nginx.conf" <<CONF
worker_processes 1;
daemon off;
pid $WORK/up/nginx.pid;
error_log $WORK/up/logs/error.log warn;
events { worker_connections 8192; }
http {
    access_log off;
    sendfile on;
    tcp_nodelay on;
    open_file_cache max=100 inactive=60s;
    keepalive_timeout 65;
    keepalive_requests 100000000;
    default_type application/octet-stream;
$(temp_paths "$WORK/up")
    server {
        listen 127.0.0.1:$UP_PORT;
        root $WORK/www;
    }
}
CONF
cat >"$WORK/front/nginx.conf" <<CONF
worker_processes 2;
daemon off;
pid $WORK/front/nginx.pid;
error_log $WORK/front/logs/error.log warn;
events { worker_connections 8192; }
http {
    access_log off;
    tcp_nodelay on;
    keepalive_timeout 65;
    keepalive_requests 100000000;
$(temp_paths "$WORK/front")
    upstream backend {
        server 127.0.0.1:$UP_PORT;
        keepalive 256;
        keepalive_requests 100000000;
    }
    server {
        listen 127.0.0.1:$FRONT_PORT reuseport;
        location / {
            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
    }
}
CONF
bench_spawn "$NGINX" -p "$WORK/up" -c "$WORK/up/nginx.conf"
PIDS+=("$!")
bench_spawn "$NGINX" -p "$WORK/front" -c "$WORK/front/nginx.conf"
NGINX_PID=$!
PIDS+=("$NGINX_PID")

# 10,000 connections (c1000 needs 1,000 plus as many upstream ones): with 20,000 and
# `ulimit -n` 20,000 seda refuses to start since f5c715e counts its descriptor reserve.
# shellcheck disable=SC2206 # EXTRA is a list of words
SEDA_ARGS=(serve --listen 127.0.0.1:0 --root "$WORK/www" --event-loops 2 --idle-timeout 65
    --max-connections 10000 --admin-listen none --proxy "/=http://127.0.0.1:$UP_PORT" $EXTRA)
bench_spawn "$SEDA_BIN" "${SEDA_ARGS[@]}" >"$WORK/seda.out" 2>"$WORK/seda.err"
SEDA_PID=$!
PIDS+=("$SEDA_PID")
for _ in $(seq 100); do
    grep -q '^listening on ' "$WORK/seda.out" 2>/dev/null && break
    sleep 0.1
done
SEDA_ADDR=$(sed -n 's#^listening on http://##p' "$WORK/seda.out")
[[ -n "$SEDA_ADDR" ]] || {
    echo "seda did not start:"
    cat "$WORK/seda.err"
    exit 1
}
declare -A PID ADDR
PID[nginx]=$NGINX_PID
ADDR[nginx]=127.0.0.1:$FRONT_PORT
PID[seda]=$SEDA_PID
ADDR[seda]=$SEDA_ADDR
for s in nginx seda; do
    for _ in $(seq 100); do
        curl -sf -o /dev/null "http://${ADDR[$s]}/1k.bin" && break
        sleep 0.1
    done
    curl -sf -o /dev/null "http://${ADDR[$s]}/1k.bin" || {
        echo "$s did not answer through the proxy:"
        cat "$WORK/front/logs/error.log" "$WORK/up/logs/error.log" "$WORK/seda.err" 2>/dev/null
        exit 1
    }
done

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
SERVERS=(nginx seda)
for round in $(seq "$ROUNDS"); do
    if ((round % 2)); then order=(nginx seda); else order=(seda nginx); fi
    for c in $CONNS; do
        for s in "${order[@]}"; do
            read -r rps us errs <<<"$(measure "${PID[$s]}" "http://${ADDR[$s]}/1k.bin" "$c")"
            RPS[$s,$c]+="$rps "
            US[$s,$c]+="$us "
            ERR[$s,$c]=$((${ERR[$s,$c]:-0} + errs))
        done
        echo "round $round c$c done" >&2
    done
done

printf '\n%5s | %10s %7s %6s | %10s %7s %6s | %10s\n' conns "nginx r/s" "us/req" errors "seda r/s" "us/req" errors "seda/nginx"
printf -- '-%.0s' {1..80}
echo
for c in $CONNS; do
    n=$(median <<<"${RPS[nginx,$c]}")
    nu=$(median <<<"${US[nginx,$c]}")
    s=$(median <<<"${RPS[seda,$c]}")
    su=$(median <<<"${US[seda,$c]}")
    printf '%5s | %10s %7s %6s | %10s %7s %6s | %10s\n' "$c" "$n" "$nu" "${ERR[nginx,$c]}" "$s" "$su" "${ERR[seda,$c]}" "$(ratio "$s" "$n")"
done
echo
echo "# us/req: CPU time of the front (all its threads or worker processes) per request; the upstream's is not counted"
