#!/usr/bin/env bash
# HTTPS: `seda serve --tls-listen` against nginx with the same certificate (ECDSA
# P-256) and the same protocols (TLS 1.2/1.3, X25519), 1 KiB over loopback, same run,
# alternating rounds.
#
#   keep-alive  wrk -c100 over TLS: requests/s and server CPU per request;
#   new conn    wrk -c50 with `Connection: close`: every request a new connection and
#               a full handshake (handshakes/s = requests/s);
# for three servers: nginx (worker_processes 2, reuseport, ssl_session_cache shared,
# access_log off), seda with the TLS stage on a pool of its own (`--tls-stage pool`,
# the default) and seda with the TLS work inline on the socket loops
# (`--tls-stage inline`). Both seda runs have --event-loops 2. The negotiated
# protocol and cipher of each server are printed (openssl s_client) before the runs.
# Loopback only; stops by itself (about 3 minutes with the defaults). Takes the
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
NGINX=$(bench_need nginx nginx)
OPENSSL=$(bench_need openssl openssl)

bench_seda_bin

bench_workdir seda-tls-bench

mkdir -p "$WORK/www" "$WORK/nginx/logs" "$WORK/pki"
chmod 755 "$WORK"
head -c 1024 /dev/urandom >"$WORK/www/1k.bin"
chmod -R a+rX "$WORK/www"
(
    cd "$WORK/pki"
    "$OPENSSL" ecparam -name prime256v1 -genkey -noout -out ca.key
    "$OPENSSL" req -x509 -new -key ca.key -subj '/CN=seda bench CA' -days 2 -out ca.pem
    "$OPENSSL" ecparam -name prime256v1 -genkey -noout -out key.pem
    "$OPENSSL" req -new -key key.pem -subj /CN=localhost -out leaf.csr
    printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' >ext.cnf
    "$OPENSSL" x509 -req -in leaf.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
        -extfile ext.cnf -out leaf.pem
    cat leaf.pem ca.pem >chain.pem
    chmod 644 ./*.pem
) >/dev/null 2>&1

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
NGINX_PORT=$(free_port)
cat >"$WORK/nginx/nginx.conf" <<CONF
worker_processes 2;
daemon off;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/logs/error.log warn;
events { worker_connections 8192; }
http {
    access_log off;
    sendfile on;
    tcp_nodelay on;
    open_file_cache max=100 inactive=60s;
    keepalive_timeout 65;
    keepalive_requests 100000000;
    default_type application/octet-stream;
    client_body_temp_path $WORK/nginx/body;
    proxy_temp_path $WORK/nginx/proxy;
    fastcgi_temp_path $WORK/nginx/fastcgi;
    uwsgi_temp_path $WORK/nginx/uwsgi;
    scgi_temp_path $WORK/nginx/scgi;
    server {
        listen 127.0.0.1:$NGINX_PORT ssl reuseport;
        ssl_certificate $WORK/pki/chain.pem;
        ssl_certificate_key $WORK/pki/key.pem;
        ssl_protocols TLSv1.2 TLSv1.3;
        ssl_ecdh_curve X25519;
        ssl_session_cache shared:SSL:10m;
        root $WORK/www;
    }
}
CONF

bench_begin tls
echo "# ${ROUNDS} rounds x ${DURATION} s, wrk -t$THREADS, 1 KiB file; keep-alive c100, new connection per request c50; $($NGINX -v 2>&1 | sed 's/.*: //'), $($OPENSSL version)"

bench_spawn "$NGINX" -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf"
NGINX_PID=$!
PIDS+=("$NGINX_PID")

declare -A PID ADDR
start_seda() { # name stage
    bench_spawn "$SEDA_BIN" serve --listen 127.0.0.1:0 --tls-listen 127.0.0.1:0 \
        --tls-cert "$WORK/pki/chain.pem" --tls-key "$WORK/pki/key.pem" --tls-stage "$2" \
        --root "$WORK/www" --event-loops 2 --idle-timeout 65 --max-connections 4096 \
        --admin-listen none >"$WORK/$1.out" 2>"$WORK/$1.err"
    PID[$1]=$!
    PIDS+=("$!")
    for _ in $(seq 100); do
        grep -q '^listening on https://' "$WORK/$1.out" 2>/dev/null && break
        sleep 0.1
    done
    ADDR[$1]=$(sed -n 's#^listening on https://##p' "$WORK/$1.out")
    [[ -n "${ADDR[$1]}" ]] || {
        echo "$1 did not start:"
        cat "$WORK/$1.err"
        exit 1
    }
}
start_seda seda-pool pool
start_seda seda-inline inline
PID[nginx]=$NGINX_PID
ADDR[nginx]=127.0.0.1:$NGINX_PORT
SERVERS=(nginx seda-pool seda-inline)
for s in "${SERVERS[@]}"; do
    for _ in $(seq 100); do
        curl -sf --cacert "$WORK/pki/ca.pem" -o /dev/null "https://localhost:${ADDR[$s]#*:}/1k.bin" && break
        sleep 0.1
    done
    curl -sf --cacert "$WORK/pki/ca.pem" -o /dev/null "https://localhost:${ADDR[$s]#*:}/1k.bin" || {
        echo "$s does not answer over TLS"
        exit 1
    }
    echo "# $s: $("$OPENSSL" s_client -connect "${ADDR[$s]}" -CAfile "$WORK/pki/ca.pem" </dev/null 2>/dev/null | grep -m1 -E '^(New|Reused),')"
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

# measure PID URL CONNS [wrk args...] -> "rps us_per_req errors"
measure() {
    local pid=$1 url=$2 conns=$3 before after out rps reqs errs us
    shift 3
    "$WRK" -t"$THREADS" -c"$conns" -d1s "$@" "$url" >/dev/null 2>&1 || true
    before=$(cpu_ticks "$pid")
    out=$("$WRK" -t"$THREADS" -c"$conns" -d"${DURATION}s" "$@" "$url" 2>&1)
    after=$(cpu_ticks "$pid")
    rps=$(awk '/^Requests\/sec:/ {print $2}' <<<"$out")
    reqs=$(awk '/requests in/ {print $1}' <<<"$out")
    errs=$(awk '/Non-2xx/ {n+=$NF} /Socket errors/ {gsub(",","");  for(i=1;i<=NF;i++) if ($i ~ /^[0-9]+$/) n+=$i} END {print n+0}' <<<"$out")
    us=$(awk -v t=$((after - before)) -v hz="$TICK" -v r="${reqs:-0}" 'BEGIN { if (r > 0) printf "%.1f", t / hz * 1e6 / r; else print "nan" }')
    echo "${rps:-0} $us $errs"
}

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END { if (NR == 0) print "nan"; else if (NR % 2) print a[(NR+1)/2]; else printf "%.1f\n", (a[NR/2] + a[NR/2+1]) / 2 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "nan" }'; }

declare -A RPS US ERR
MODES=(keepalive newconn)
for round in $(seq "$ROUNDS"); do
    order=("${SERVERS[@]:$((round % 3))}" "${SERVERS[@]:0:$((round % 3))}")
    for m in "${MODES[@]}"; do
        for s in "${order[@]}"; do
            url="https://${ADDR[$s]}/1k.bin"
            if [[ $m == keepalive ]]; then
                read -r rps us errs <<<"$(measure "${PID[$s]}" "$url" 100)"
            else
                read -r rps us errs <<<"$(measure "${PID[$s]}" "$url" 50 -H 'Connection: close')"
            fi
            RPS[$s,$m]+="$rps "
            US[$s,$m]+="$us "
            ERR[$s,$m]=$((${ERR[$s,$m]:-0} + errs))
        done
    done
    echo "round $round done" >&2
done

printf '\n%-10s | %-11s | %10s %8s %6s | %8s\n' mode server "req/s" "us/req" errors "/nginx"
printf -- '-%.0s' {1..66}
echo
for m in "${MODES[@]}"; do
    n=$(median <<<"${RPS[nginx,$m]}")
    for s in "${SERVERS[@]}"; do
        r=$(median <<<"${RPS[$s,$m]}")
        printf '%-10s | %-11s | %10s %8s %6s | %8s\n' "$m" "$s" "$r" "$(median <<<"${US[$s,$m]}")" "${ERR[$s,$m]}" "$(ratio "$r" "$n")"
    done
done
echo
echo "# req/s: median over the rounds; newconn: every request a new TCP connection and a full TLS handshake (req/s = handshakes/s); us/req: server CPU (all threads or worker processes) per request"
