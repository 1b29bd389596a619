#!/usr/bin/env bash
# Memory of idle keep-alive connections: Haboob (`seda serve`) beside nginx, same run,
# same machine (issue 29.5: 2,000 idle connections cost Haboob ~17 kB each, and the
# memory stayed after they closed).
#
#   bench/idle-memory/run.sh            (CONNS=2000 ROUNDS=3 by default)
#
# ROUNDS times, with both servers started afresh each round (memory a process once
# took and keeps for reuse would otherwise hide the cost from the next round): for
# each server in turn, CONNS connections each send one `GET /hello.txt`
# (keep-alive), read the answer and stay open, idle; then all close. Memory is the
# proportional set size (Pss, /proc/PID/smaps_rollup) summed over the server's
# processes (nginx: master and workers), read before the connections open (after
# 20 warm-up requests), while they are open and idle (after 2 s), and after they
# closed (after 2 s). Printed per server and round: bytes per idle connection
# ((open - before) / CONNS) and bytes still held per connection once they closed
# ((closed - before) / CONNS: memory the process keeps for reuse, not a leak, if a
# second wave of connections needs none), with the medians and the ratio
# seda/nginx.
#
# Settings: nginx 2 workers (reuseport), keepalive_timeout 300 s, access_log off;
# seda serve --event-loops 2 (defaults otherwise: idle timeout 30 s, longer than a
# round). The client is one Python process (python3) on loopback. Bytes are not time:
# the load does not change them, but the script takes the benchmark lock
# (bench/lib.sh) like every benchmark. About 1 minute.
set -euo pipefail
cd "$(dirname "$0")/../.."
. bench/lib.sh

CONNS=${CONNS:-2000}
ROUNDS=${ROUNDS:-3}
bench_lock
NGINX=$(bench_need nginx nginx)
PYTHON=$(bench_need python3 python3)
bench_seda_bin
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
if (($(ulimit -n) < CONNS + 200)); then
    echo "run.sh: CONNS=$CONNS needs an open-files limit of at least $((CONNS + 200)) (ulimit -n is $(ulimit -n))" >&2
    exit 2
fi
bench_begin --any-load idle-memory

WORK=$(mktemp -d /tmp/seda-idle-memory.XXXXXX)
chmod 755 "$WORK"
bench_at_exit 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$WORK"'
mkdir -p "$WORK/www" "$WORK/nginx/logs"
printf 'hello, world\n' >"$WORK/www/hello.txt"
chmod -R a+rX "$WORK/www"

port() { "$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
NGINX_PORT=$(port)
cat >"$WORK/nginx/nginx.conf" <<CONF
worker_processes 2;
daemon off;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/logs/error.log warn;
worker_rlimit_nofile $((CONNS + 1000));
events { worker_connections $((CONNS + 500)); }
http {
    access_log off;
    keepalive_timeout 300s;
    keepalive_requests 100000;
    default_type text/plain;
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
start_servers() {
    bench_spawn "$NGINX" -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf"
    NGINX_PID=$!
    bench_spawn "$SEDA_BIN" serve --listen 127.0.0.1:0 --root "$WORK/www" --event-loops 2 \
        --admin-listen none >"$WORK/seda.out" 2>"$WORK/seda.err"
    SEDA_PID=$!
    for _ in $(seq 100); do
        grep -q '^listening on' "$WORK/seda.out" 2>/dev/null && break
        sleep 0.1
    done
    SEDA_ADDR=$(sed -n 's/^listening on http:\/\///p' "$WORK/seda.out")
    [[ -n "$SEDA_ADDR" ]] || { cat "$WORK/seda.err" >&2; exit 1; }
    # nginx is up once its port answers.
    for _ in $(seq 100); do
        "$PYTHON" -c "import socket,sys; socket.create_connection(('127.0.0.1', $NGINX_PORT), 1)" 2>/dev/null && break
        sleep 0.1
    done
}
stop_servers() {
    kill "$SEDA_PID" "$NGINX_PID" 2>/dev/null || true
    wait "$SEDA_PID" "$NGINX_PID" 2>/dev/null || true
}
echo "# seda: $("$SEDA_BIN" --version); nginx: $("$NGINX" -v 2>&1 | sed 's/.*: //'); $CONNS connections, $ROUNDS rounds, fresh servers each round"

: >"$WORK/results"
for round in $(seq "$ROUNDS"); do
    start_servers
    "$PYTHON" - "$CONNS" "$round" "$WORK/results" "seda=$SEDA_ADDR=$SEDA_PID" "nginx=127.0.0.1:$NGINX_PORT=$NGINX_PID" <<'PY'
import os, socket, statistics, sys, time

conns, r, results = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
servers = []
for arg in sys.argv[4:]:
    name, addr, pid = arg.split("=")
    host, port = addr.rsplit(":", 1)
    servers.append((name, (host, int(port)), int(pid)))

def pids(root):
    """The server and its children (nginx's workers)."""
    out = [root]
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == root:
                        out.append(int(p))
            except OSError:
                pass
    return out

def pss(root):
    total = 0
    for p in pids(root):
        with open(f"/proc/{p}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    total += int(line.split()[1]) * 1024
    return total

REQ = b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n"

def answered(s):
    buf = b""
    while b"hello, world\n" not in buf:
        chunk = s.recv(4096)
        if not chunk:
            raise SystemExit("the server closed a connection")
        buf += chunk

for name, addr, pid in servers:
    # Warm: a few requests so that caches and pools exist before "before".
    for _ in range(20):
        s = socket.create_connection(addr)
        s.sendall(REQ)
        answered(s)
        s.close()
    time.sleep(1)
    before = pss(pid)
    socks = []
    for _ in range(conns):
        s = socket.create_connection(addr)
        s.sendall(REQ)
        answered(s)
        socks.append(s)
    time.sleep(2)
    idle = pss(pid)
    for s in socks:
        s.close()
    time.sleep(2)
    after = pss(pid)
    per = (idle - before) / conns
    kept = (after - before) / conns
    with open(results, "a") as f:
        f.write(f"{name} {per} {kept}\n")
    print(f"round {r} {name:6} before {before / 2**20:7.1f} MiB  idle {idle / 2**20:7.1f} MiB  "
          f"closed {after / 2**20:7.1f} MiB  | {per:8.0f} B per idle connection, {kept:8.0f} B still held per connection after close",
          flush=True)
PY
    stop_servers
done

"$PYTHON" - "$WORK/results" <<'PY'
import statistics, sys

rows = {}
for line in open(sys.argv[1]):
    name, per, kept = line.split()
    rows.setdefault(name, []).append((float(per), float(kept)))
print()
print(f"{'server':8} | {'bytes per idle connection (median)':>36} | {'held after close, per connection':>34}")
med = {}
for name, rs in rows.items():
    med[name] = (statistics.median(p for p, _ in rs), statistics.median(k for _, k in rs))
    print(f"{name:8} | {med[name][0]:36.0f} | {med[name][1]:34.0f}")
if "seda" in med and "nginx" in med and med["nginx"][0] > 0:
    print(f"ratio seda/nginx, bytes per idle connection: {med['seda'][0] / med['nginx'][0]:.2f}x")
PY
