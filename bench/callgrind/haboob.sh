#!/usr/bin/env bash
# User-space instructions per request of Haboob (`seda serve`), nginx, h2o and the
# ceiling (bench/ceiling) under callgrind: 1 KiB static file, keep-alive, the same
# requests over the same connections for every server.
#
# Each server runs under callgrind; a small Python client (not measured) opens CONNS
# keep-alive connections and sends requests round robin, one outstanding per
# connection. Counters are zeroed after a warm-up, then dumped after N1 and again
# after N2 more requests (zeroed in between); the figure is
# (Ir(N2) - Ir(N1)) / (N2 - N1): the cost of one more request, the idle ticks of
# both phases mostly cancelled. Then the server sits idle for IDLE_S seconds: its
# instructions per idle second times the N2 phase's extra seconds over the N1 phase,
# divided by N2 - N1, is what timers (the once-a-second stats, for Haboob) still add
# to the figure ("idle/req"); "net" subtracts it. Repeatable on a loaded machine
# (instruction counts, not time); system calls and the kernel are not counted.
#
# Servers, each at its best static setup:
#   seda     `seda serve --event-loops 2` (defaults: page cache, inline handoff) + EXTRA
#   nginx    one process (`master_process off; daemon off;`), open_file_cache,
#            sendfile, tcp_nopush, tcp_nodelay, access_log off, no keep-alive cap
#   h2o      Debian's h2o, one thread (num-threads 1), no access log
#   ceiling  bench/ceiling with 2 threads: a canned reply, no parsing, no file
# and the ratios seda/nginx, seda/h2o and seda/ceiling of both figures.
#
# Usage: bench/callgrind/haboob.sh [seda|nginx|h2o|ceiling]...   (default: all four)
# Environment: N1 (1000), N2 (5000), CONNS (4), IDLE_S (5), SEDA_BIN (default: build
# target/release/seda), EXTRA (more `seda serve` arguments), KEEP (a directory for
# the callgrind.out files). Installs valgrind, nginx and h2o with apt-get if missing.
# It takes the benchmark lock (bench/lib.sh) but does not wait for a quiet machine.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
. "$REPO/bench/lib.sh"
N1=${N1:-1000}
N2=${N2:-5000}
CONNS=${CONNS:-4}
IDLE_S=${IDLE_S:-5}
WHICH=("$@")
[[ ${#WHICH[@]} -gt 0 ]] || WHICH=(seda nginx h2o ceiling)
for w in "${WHICH[@]}"; do
    case $w in
    seda | nginx | h2o | ceiling) ;;
    *) echo "haboob.sh: unknown server '$w' (known: seda nginx h2o ceiling)" >&2 && exit 2 ;;
    esac
done
bench_lock
VALGRIND=$(bench_need valgrind valgrind)
CALLGRIND_CONTROL=$(bench_need callgrind_control valgrind)
for w in "${WHICH[@]}"; do
    case $w in
    nginx) NGINX=$(bench_need nginx nginx) ;;
    h2o) H2O=$(bench_need h2o h2o) ;;
    seda) bench_seda_bin ;;
    ceiling)
        (cd "$REPO/bench/ceiling" && cargo build --release -q)
        CEILING_BIN="$REPO/bench/ceiling/target/release/ceiling"
        ;;
    esac
done
WORK=$(mktemp -d -t seda-cg-haboob.XXXXXX)
OUT=${KEEP:-$WORK}
mkdir -p "$OUT" "$WORK/www"
SERVER_PID=
control() { # callgrind_control ARGS for the server (bounded: a stuck vgdb must not hang us)
    timeout 300 "$CALLGRIND_CONTROL" "$@" "$SERVER_PID" >/dev/null 2>&1 || {
        echo "callgrind_control $* failed for $SERVER_PID" >&2
        exit 1
    }
}
stop_server() {
    bench_stop "$SERVER_PID"
    SERVER_PID=
}
cleanup() {
    stop_server
    rm -rf "$WORK"
}
bench_at_exit cleanup
bench_begin --any-load callgrind/haboob
head -c 1024 /dev/urandom >"$WORK/www/1k.bin"
chmod 755 "$WORK"
chmod -R a+rX "$WORK/www"

cat >"$WORK/client.py" <<'PY'
import socket, sys
host, port, conns, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
req = b"GET /1k.bin HTTP/1.1\r\nHost: x\r\n\r\n"
socks = [socket.create_connection((host, port)) for _ in range(conns)]
bufs = [b""] * conns
def one(i):
    s = socks[i]
    s.sendall(req)
    buf = bufs[i]
    while True:
        h = buf.find(b"\r\n\r\n")
        if h >= 0:
            head = buf[:h].decode("latin-1").lower()
            if not head.startswith("http/1.1 200"):
                sys.exit("unexpected response: " + head.splitlines()[0])
            cl = int(head.split("content-length:")[1].split("\r\n")[0])
            if len(buf) >= h + 4 + cl:
                bufs[i] = buf[h + 4 + cl:]
                return
        chunk = s.recv(65536)
        if not chunk:
            sys.exit("connection closed")
        buf += chunk
for k in range(n):
    one(k % conns)
PY

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# The peers' configurations (ADDR is the port they listen on).
nginx_conf() { # port
    mkdir -p "$WORK/nginx/logs"
    cat >"$WORK/nginx/nginx.conf" <<CONF
master_process off;
daemon off;
worker_processes 1;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/logs/error.log warn;
events { worker_connections 1024; }
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
        listen 127.0.0.1:$1;
        root $WORK/www;
    }
}
CONF
}
h2o_conf() { # port (as root, h2o would switch to nobody, out of vgdb's reach)
    mkdir -p "$WORK/h2o"
    cat >"$WORK/h2o/h2o.conf" <<CONF
num-threads: 1
max-connections: 20000
$([[ $(id -u) == 0 ]] && echo "user: root")
error-log: $WORK/h2o/error.log
listen:
  host: 127.0.0.1
  port: $1
hosts:
  default:
    paths:
      /:
        file.dir: $WORK/www
CONF
}

now() { date +%s.%N; }
summary() { sed -n 's/^summary: //p' "$1"; }
# controller FILE: inclusive instructions of the calls to seda's controller thread
# (seda::runtime::drive) in a dump (0 for other servers). Names and positions are not
# compressed (see `run`), so each call's cost is the line after its `calls=` line.
controller() {
    awk '/^cfn=seda::runtime::drive$/ {c = 1; next}
         c == 1 && /^calls=/ {c = 2; next}
         c == 2 {s += $2; c = 0; next}
         {c = 0}
         END {print s + 0}' "$1"
}
declare -A RAW NET

# run NAME PORT CMD... : PORT is the port the server listens on, or "" when it prints
# `listening on http://ADDR`. Prints one line of the table; sets RAW[NAME], NET[NAME].
run() {
    local name=$1 port=$2
    shift 2
    bench_spawn "$VALGRIND" --tool=callgrind --compress-strings=no --compress-pos=no --callgrind-out-file="$OUT/callgrind.out.$name" \
        "$@" >"$WORK/$name.out" 2>"$WORK/$name.err"
    SERVER_PID=$!
    local addr=
    for _ in $(seq 600); do
        if [[ -z "$port" ]]; then
            addr=$(sed -n 's#^listening on http://##p' "$WORK/$name.out" | head -1)
        elif curl -sf -o /dev/null "http://127.0.0.1:$port/1k.bin"; then
            addr=127.0.0.1:$port
        fi
        [[ -n "$addr" ]] && break
        kill -0 "$SERVER_PID" 2>/dev/null || break
        sleep 0.1
    done
    [[ -n "$addr" ]] || {
        echo "$name did not start:" >&2
        cat "$WORK/$name.err" "$WORK/nginx/logs/error.log" "$WORK/h2o/error.log" 2>/dev/null | tail -20 >&2
        exit 1
    }
    local host=${addr%:*} p=${addr##*:} t0 t1 t2 t3 t4
    timeout 600 python3 "$WORK/client.py" "$host" "$p" "$CONNS" 200 # warm-up
    control -z
    rm -f "$OUT/callgrind.out.$name".[123]
    t0=$(now)
    timeout 600 python3 "$WORK/client.py" "$host" "$p" "$CONNS" "$N1"
    t1=$(now)
    control -d "n1"
    t2=$(now)
    timeout 600 python3 "$WORK/client.py" "$host" "$p" "$CONNS" "$N2"
    t3=$(now)
    control -d "n2"
    t4=$(now)
    sleep "$IDLE_S"
    control -d "idle"
    local t5
    t5=$(now)
    stop_server
    # A dump resets the counters: .1 holds the N1 phase, .2 the N2 phase, .3 the idle.
    local a b i ca cb ci
    a=$(summary "$OUT/callgrind.out.$name.1")
    b=$(summary "$OUT/callgrind.out.$name.2")
    i=$(summary "$OUT/callgrind.out.$name.3")
    ca=$(controller "$OUT/callgrind.out.$name.1")
    cb=$(controller "$OUT/callgrind.out.$name.2")
    ci=$(controller "$OUT/callgrind.out.$name.3")
    local raw ctl idle net idle_s n1_s n2_s
    read -r raw ctl idle net idle_s n1_s n2_s < <(python3 -c '
import sys
a, b, i, ca, cb, ci, t0, t2, t4, t5 = map(float, sys.argv[1:11])
n1, n2 = int(sys.argv[11]), int(sys.argv[12])
raw = (b - a) / (n2 - n1)
ctl = (cb - ca) / (n2 - n1)
idle_per_s = (i - ci) / (t5 - t4)
# Each phase spans from the previous dump to its own dump.
idle = idle_per_s * ((t4 - t2) - (t2 - t0)) / (n2 - n1)
print("%.0f %.0f %.0f %.0f %.0f %.1f %.1f" % (raw, ctl, idle, raw - ctl - idle, idle_per_s, t2 - t0, t4 - t2))
' "$a" "$b" "$i" "$ca" "$cb" "$ci" "$t0" "$t2" "$t4" "$t5" "$N1" "$N2")
    RAW[$name]=$raw
    NET[$name]=$net
    printf '%-8s %9s %9s %9s %9s %10s %7s %7s\n' "$name" "$raw" "$ctl" "$idle" "$net" "$idle_s" "$n1_s" "$n2_s"
    for k in 1 2 3; do
        mv "$OUT/callgrind.out.$name.$k" "$OUT/callgrind.out.$name.$(echo n1 n2 idle | cut -d' ' -f$k)"
    done
}

echo "# user-space instructions per request (callgrind), 1 KiB keep-alive, $CONNS connections, N = $N1 and $N2, idle $IDLE_S s; $("$VALGRIND" --version)"
printf '%-8s %9s %9s %9s %9s %10s %7s %7s\n' server "Ir/req" "ctl/req" "idle/req" "net" "idle Ir/s" "N1 s" "N2 s"
for w in "${WHICH[@]}"; do
    case $w in
    seda)
        # shellcheck disable=SC2086 # EXTRA is a list of words
        run seda "" "$SEDA_BIN" serve --listen 127.0.0.1:0 --root "$WORK/www" --event-loops 2 \
            --admin-listen none ${EXTRA:-}
        ;;
    nginx)
        port=$(free_port)
        nginx_conf "$port"
        run nginx "$port" "$NGINX" -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf"
        ;;
    h2o)
        port=$(free_port)
        h2o_conf "$port"
        run h2o "$port" "$H2O" -c "$WORK/h2o/h2o.conf"
        ;;
    ceiling) run ceiling "" "$CEILING_BIN" 127.0.0.1:0 2 1024 ;;
    esac
done
ratio() { python3 -c "print('%.2fx' % ($1 / $2))"; }
echo
if [[ -n "${RAW[seda]:-}" ]]; then
    printf '%-12s %9s %9s\n' ratio "Ir/req" "net"
    for peer in nginx h2o ceiling; do
        [[ -n "${RAW[$peer]:-}" ]] || continue
        printf '%-12s %9s %9s\n' "seda/$peer" "$(ratio "${RAW[seda]}" "${RAW[$peer]}")" \
            "$(ratio "${NET[seda]}" "${NET[$peer]}")"
    done
fi
echo "Ir/req: (Ir(N2) - Ir(N1)) / (N2 - N1); ctl/req: the part of it spent in seda's"
echo "controller thread (seda::runtime::drive: stats windows, controllers, once per control"
echo "interval; callgrind runs the server ~50x slower, so this per-second work shows ~50x"
echo "its weight at full speed); idle/req: the server's other instructions per idle second"
echo "times the N2 phase's extra seconds, per request (timers); net = Ir/req - ctl/req -"
echo "idle/req; N1 s, N2 s: the phases' seconds under callgrind."
if [[ -n "${RAW[seda]:-}" && -f "$OUT/callgrind.out.seda.n2" ]]; then
    echo
    echo "Haboob per layer (bench/callgrind/layers.py; self instructions by function name,"
    echo "shared helpers charged to their callers):"
    python3 "$HERE/layers.py" "$OUT/callgrind.out.seda.n1" "$OUT/callgrind.out.seda.n2" "$((N2 - N1))"
fi
