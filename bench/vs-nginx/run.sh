#!/usr/bin/env bash
# Haboob (`seda serve`) against nginx on loopback, same files, same machine, same run.
#
# Serves one directory (1 KiB, 16 KiB and 256 KiB files) from both servers with
# equivalent settings (nginx: worker_processes 2, sendfile on, access_log off,
# keep-alive without a request cap; seda: two event loops, page cache on), runs wrk at
# 100 and 1,000 keep-alive connections per file, and prints requests per second, the
# servers' CPU time per request and the ratio seda/nginx. Loopback only; stops by
# itself (about 3 minutes with the defaults).
#
# Environment: DURATION (seconds per run, default 10), THREADS (wrk threads, 2),
# CARGO_TARGET_DIR (where to build seda), SEDA_BIN (use this binary instead).
set -euo pipefail

DURATION=${DURATION:-10}
THREADS=${THREADS:-2}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)

install_if_missing() { # command package
    if ! command -v "$1" >/dev/null 2>&1; then
        echo "installing $2 ..." >&2
        apt-get update -qq >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null
    fi
}
install_if_missing wrk wrk
install_if_missing nginx nginx
NGINX=$(command -v nginx || echo /usr/sbin/nginx)

if [[ -z "${SEDA_BIN:-}" ]]; then
    (cd "$REPO" && cargo build --release -q -p seda-cli)
    SEDA_BIN="${CARGO_TARGET_DIR:-$REPO/target}/release/seda"
fi

ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
WORK=$(mktemp -d /tmp/seda-vs-nginx.XXXXXX)
NGINX_PID=""
SEDA_PID=""
cleanup() {
    [[ -n "$SEDA_PID" ]] && kill "$SEDA_PID" 2>/dev/null && wait "$SEDA_PID" 2>/dev/null || true
    [[ -n "$NGINX_PID" ]] && kill "$NGINX_PID" 2>/dev/null && wait "$NGINX_PID" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

mkdir -p "$WORK/www" "$WORK/nginx/logs"
chmod 755 "$WORK"  # nginx workers run as an unprivileged user
head -c 1024 /dev/urandom >"$WORK/www/1k.bin"
head -c 16384 /dev/urandom >"$WORK/www/16k.bin"
head -c 262144 /dev/urandom >"$WORK/www/256k.bin"
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
"$NGINX" -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf" &
NGINX_PID=$!

"$SEDA_BIN" serve --listen 127.0.0.1:0 --root "$WORK/www" --event-loops 2 --idle-timeout 65 \
    --max-connections 20000 >"$WORK/seda.out" 2>"$WORK/seda.err" &
SEDA_PID=$!
for _ in $(seq 100); do
    grep -q '^listening on ' "$WORK/seda.out" 2>/dev/null && break
    sleep 0.1
done
SEDA_ADDR=$(sed -n 's#^listening on http://##p' "$WORK/seda.out")
[[ -n "$SEDA_ADDR" ]] || { echo "seda did not start:"; cat "$WORK/seda.err"; exit 1; }
for _ in $(seq 50); do
    curl -sf -o /dev/null "http://127.0.0.1:$NGINX_PORT/1k.bin" && break
    sleep 0.1
done

# CPU time (user+system, clock ticks) of a process and its children threads/workers.
cpu_ticks() {
    local total=0 p
    for p in "$1" $(pgrep -P "$1" || true); do
        [[ -r /proc/$p/stat ]] || continue
        total=$((total + $(awk '{print $14 + $15}' "/proc/$p/stat")))
    done
    echo "$total"
}
TICK=$(getconf CLK_TCK)

# run NAME PID URL CONNS -> prints "rps us_per_req errors"
run() {
    local pid=$2 url=$3 conns=$4 before after out rps reqs errs
    wrk -t"$THREADS" -c"$conns" -d1s "$url" >/dev/null 2>&1 || true
    before=$(cpu_ticks "$pid")
    out=$(wrk -t"$THREADS" -c"$conns" -d"${DURATION}s" "$url" 2>&1)
    after=$(cpu_ticks "$pid")
    rps=$(awk '/^Requests\/sec:/ {print $2}' <<<"$out")
    reqs=$(awk '/requests in/ {print $1}' <<<"$out")
    errs=$(awk '/Non-2xx/ {n+=$NF} /Socket errors/ {gsub(",","");  for(i=1;i<=NF;i++) if ($i ~ /^[0-9]+$/) n+=$i} END {print n+0}' <<<"$out")
    local us
    us=$(awk -v t=$((after - before)) -v hz="$TICK" -v r="${reqs:-0}" 'BEGIN { if (r > 0) printf "%.1f", t / hz * 1e6 / r; else print "nan" }')
    echo "${rps:-0} $us $errs"
}

printf '%-8s %6s | %12s %8s | %12s %8s | %6s\n' file conns "nginx req/s" "us/req" "seda req/s" "us/req" "ratio"
printf -- '-%.0s' {1..76}; echo
for file in 1k.bin 16k.bin 256k.bin; do
    for conns in 100 1000; do
        read -r n_rps n_us n_err <<<"$(run nginx "$NGINX_PID" "http://127.0.0.1:$NGINX_PORT/$file" "$conns")"
        read -r s_rps s_us s_err <<<"$(run seda "$SEDA_PID" "http://$SEDA_ADDR/$file" "$conns")"
        ratio=$(awk -v s="$s_rps" -v n="$n_rps" 'BEGIN { if (n > 0) printf "%.2f", s / n; else print "nan" }')
        printf '%-8s %6s | %12s %8s | %12s %8s | %6sx' "$file" "$conns" "$n_rps" "$n_us" "$s_rps" "$s_us" "$ratio"
        [[ "$n_err$s_err" != "00" ]] && printf '  (errors: nginx %s, seda %s)' "$n_err" "$s_err"
        echo
    done
done
echo
echo "us/req: server CPU time (user+system, all threads/workers) per request; wrk shares the same cores."
