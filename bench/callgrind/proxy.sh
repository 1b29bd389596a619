#!/usr/bin/env bash
# User-space instructions per proxied request under callgrind (issue 26, item 4): the
# front (`seda serve --proxy /=UPSTREAM --event-loops 2`, or nginx `proxy_pass` with
# upstream keepalive, one process) runs under callgrind in front of an nginx serving
# a 1 KiB file; a Python client sends N1, then N2 requests over CONNS keep-alive
# connections (counters zeroed before each phase); the figure is
# (Ir(N2) - Ir(N1)) / (N2 - N1). Instruction counts do not depend on the load (run it
# at any load, not in a benchmark window). Leaves the callgrind.out
# files in the printed directory for callgrind_annotate.
# seda runs on the epoll backend unless IO=uring (valgrind's support of io_uring is
# partial, and the figures before 2026-11-27 were taken on epoll).
#   bench/callgrind/proxy.sh SEDA_BIN seda|nginx     (env: N1 2000, N2 6000, CONNS 4, IO)
set -euo pipefail
SEDA=$1; WHICH=$2; N1=${N1:-2000}; N2=${N2:-6000}; CONNS=${CONNS:-4}
W=$(mktemp -d -t seda-cg-proxy.XXXXXX); chmod 755 $W
mkdir -p $W/www $W/up/logs $W/front/logs; head -c 1024 /dev/urandom > $W/www/1k.bin; chmod -R a+rX $W/www
fp() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
UP=$(fp); FR=$(fp)
tp() { echo "client_body_temp_path $1/b; proxy_temp_path $1/p; fastcgi_temp_path $1/f; uwsgi_temp_path $1/u; scgi_temp_path $1/s;"; }
cat > $W/up/nginx.conf <<C
worker_processes 1; daemon off; pid $W/up/pid; error_log $W/up/logs/e warn;
events { worker_connections 4096; }
http { access_log off; sendfile on; tcp_nodelay on; open_file_cache max=100; keepalive_requests 100000000; $(tp $W/up)
 server { listen 127.0.0.1:$UP; root $W/www; } }
C
cat > $W/front/nginx.conf <<C
master_process off; daemon off; worker_processes 1; pid $W/front/pid; error_log $W/front/logs/e warn;
events { worker_connections 4096; }
http { access_log off; tcp_nodelay on; keepalive_requests 100000000; $(tp $W/front)
 upstream backend { server 127.0.0.1:$UP; keepalive 256; keepalive_requests 100000000; }
 server { listen 127.0.0.1:$FR; location / { proxy_pass http://backend; proxy_http_version 1.1; proxy_set_header Connection ""; } } }
C
nginx -c $W/up/nginx.conf -p $W/up & UPPID=$!
sleep 0.5
if [[ $WHICH == seda ]]; then
  valgrind --tool=callgrind --callgrind-out-file=$W/cg.out $SEDA serve --listen 127.0.0.1:$FR --root $W/www --event-loops 2 --io ${IO:-epoll} --proxy /=http://127.0.0.1:$UP > $W/s.out 2> $W/s.err & SP=$!
else
  valgrind --tool=callgrind --callgrind-out-file=$W/cg.out nginx -c $W/front/nginx.conf -p $W/front > $W/s.out 2> $W/s.err & SP=$!
fi
for _ in $(seq 600); do curl -sf -o /dev/null http://127.0.0.1:$FR/1k.bin && break; sleep 0.2; done
cat > $W/client.py <<'PY'
import socket, sys
port, conns, n = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
req = b"GET /1k.bin HTTP/1.1\r\nHost: x\r\n\r\n"
socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(conns)]
bufs = [b""] * conns
for k in range(n):
    i = k % conns; s = socks[i]; s.sendall(req); buf = bufs[i]
    while True:
        h = buf.find(b"\r\n\r\n")
        if h >= 0:
            head = buf[:h].decode("latin-1").lower()
            assert head.startswith("http/1.1 200"), head
            cl = int(head.split("content-length:")[1].split("\r\n")[0])
            if len(buf) >= h + 4 + cl:
                bufs[i] = buf[h + 4 + cl:]; break
        c = s.recv(65536); assert c; buf += c
PY
python3 $W/client.py $FR $CONNS 500
callgrind_control -z $SP >/dev/null
python3 $W/client.py $FR $CONNS $N1
callgrind_control -d n1 $SP >/dev/null
callgrind_control -z $SP >/dev/null
python3 $W/client.py $FR $CONNS $N2
callgrind_control -d n2 $SP >/dev/null
kill $SP; wait $SP 2>/dev/null || true; kill $UPPID; wait $UPPID 2>/dev/null || true
A=$(cat $W/cg.out.1 | grep "^summary:" | awk '{s+=$2} END {print s}')
B=$(cat $W/cg.out.2 | grep "^summary:" | awk '{s+=$2} END {print s}')
echo "$WHICH: N1 $A N2 $B per-request $(( (B - A) / (N2 - N1) )) dir $W"
