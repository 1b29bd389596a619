#!/usr/bin/env bash
# Memory of idle keep-alive connections: Haboob (`seda serve`) beside nginx, same run,
# same machine (issue 29.5: 2,000 idle connections cost Haboob ~17 kB each, and the
# memory stayed after they closed).
#
#   bench/idle-memory/run.sh            (CONNS=2000 ROUNDS=3 IOS="epoll uring" by default)
#
# ROUNDS times, with both servers started afresh each round (memory a process once
# took and keeps for reuse would otherwise hide the cost from the next round): for
# each server in turn, CONNS connections each send one `GET /hello.txt`
# (keep-alive), read the answer and stay open, idle; then all close. Memory is the
# proportional set size (Pss, /proc/PID/smaps_rollup) summed over the server's
# processes (nginx: master and workers), read before the connections open (after
# a warm-up of WARM keep-alive requests, 4,000 by default, over 40 connections),
# while they are open and idle (after 2 s), and after they closed (after 2 s).
# The warm-up touches what a server keeps whatever its connection count: the
# io_uring loops' provided receive buffers (8 MiB per loop, FIFO: each receive
# takes the next one, so a small request first touches a page of each of them over
# the first few hundred receives per loop); with 20 warm-up requests those pages
# were touched during the measured wave and counted as per-connection cost (2,751 B
# per connection at 2,000, 4,817 at 500, 1,718 at 4,000 in one run: not a
# per-connection cost). "before" is printed: the fixed cost is visible there. Printed per server and round: bytes per idle connection
# ((open - before) / CONNS) and bytes still held per connection once they closed
# ((closed - before) / CONNS: memory the process keeps for reuse, not a leak, if a
# second wave of connections needs none), with the medians and the ratio
# seda/nginx.
#
# Settings: nginx 2 workers (reuseport), keepalive_timeout 300 s, access_log off;
# seda serve --event-loops 2 --io IO for each socket backend in IOS (rows
# seda/epoll, seda/uring; defaults otherwise: idle timeout 30 s, longer than a
# round). The client is one Python process (python3) on loopback. Bytes are not time:
# the load does not change them, but the script takes the benchmark lock
# (bench/lib.sh) like every benchmark. About 2 minutes.
set -euo pipefail
cd "$(dirname "$0")/../.."
. bench/lib.sh

CONNS=${CONNS:-2000}
ROUNDS=${ROUNDS:-3}
IOS=${IOS:-epoll uring}
WARM=${WARM:-4000}
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
    SEDA_ARGS=() SEDA_PIDS=()
    for io in $IOS; do
        bench_spawn "$SEDA_BIN" serve --listen 127.0.0.1:0 --root "$WORK/www" --event-loops 2 \
            --io "$io" --admin-listen none >"$WORK/seda-$io.out" 2>"$WORK/seda-$io.err"
        local pid=$!
        for _ in $(seq 100); do
            grep -q '^listening on' "$WORK/seda-$io.out" 2>/dev/null && break
            sleep 0.1
        done
        local addr
        addr=$(sed -n 's/^listening on http:\/\///p' "$WORK/seda-$io.out")
        [[ -n "$addr" ]] || { cat "$WORK/seda-$io.err" >&2; exit 1; }
        SEDA_ARGS+=("seda/$io=$addr=$pid")
        SEDA_PIDS+=("$pid")
    done
    # nginx is up once its port answers.
    for _ in $(seq 100); do
        "$PYTHON" -c "import socket,sys; socket.create_connection(('127.0.0.1', $NGINX_PORT), 1)" 2>/dev/null && break
        sleep 0.1
    done
}
stop_servers() {
    kill "${SEDA_PIDS[@]}" "$NGINX_PID" 2>/dev/null || true
    wait "${SEDA_PIDS[@]}" "$NGINX_PID" 2>/dev/null || true
}
echo "# seda: $("$SEDA_BIN" --version) (--io: $IOS); nginx: $("$NGINX" -v 2>&1 | sed 's/.*: //'); $CONNS connections, $ROUNDS rounds, $WARM warm-up requests, fresh servers each round"

: >"$WORK/results"
for round in $(seq "$ROUNDS"); do
    start_servers
    "$PYTHON" - "$CONNS" "$round" "$WORK/results" "$WARM" "${SEDA_ARGS[@]}" "nginx=127.0.0.1:$NGINX_PORT=$NGINX_PID" <<'PY'
import os, socket, statistics, sys, time

conns, r, results, warm = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
servers = []
for arg in sys.argv[5:]:
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
    # Warm: caches, pools and the io_uring loops' provided buffers exist and are
    # touched before "before" (keep-alive requests on 40 connections, spread over
    # both event loops / workers).
    warmers = [socket.create_connection(addr) for _ in range(40)]
    for i in range(warm):
        s = warmers[i % len(warmers)]
        s.sendall(REQ)
        answered(s)
    for s in warmers:
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
    print(f"round {r} {name:10} before {before / 2**20:7.1f} MiB  idle {idle / 2**20:7.1f} MiB  "
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
print(f"{'server':10} | {'bytes per idle connection (median)':>36} | {'held after close, per connection':>34} | ratio to nginx")
med = {}
for name, rs in rows.items():
    med[name] = (statistics.median(p for p, _ in rs), statistics.median(k for _, k in rs))
for name in med:
    ratio = ""
    if name != "nginx" and med.get("nginx", (0,))[0] > 0:
        ratio = f"{med[name][0] / med['nginx'][0]:.2f}x"
    print(f"{name:10} | {med[name][0]:36.0f} | {med[name][1]:34.0f} | {ratio}")
PY
