#!/usr/bin/env bash
# User-space instructions per request of Haboob (`seda serve`), and of the ceiling
# (bench/ceiling) for reference, under callgrind: 1 KiB static file, keep-alive.
#
# The server runs under callgrind; a small Python client (not measured) opens CONNS
# keep-alive connections and sends requests round robin, one outstanding per
# connection. Counters are zeroed after a warm-up, then dumped after N1 and again
# after N2 more requests (zeroed in between); the figure is
# (Ir(N2) - Ir(N1)) / (N2 - N1): the cost of one more request, the idle ticks of
# both phases mostly cancelled. Repeatable on a loaded machine (instruction
# counts, not time); system calls are not counted.
#
# Usage: bench/callgrind/haboob.sh [seda|ceiling]...   (default: both)
# Environment: N1 (1000), N2 (5000), CONNS (4), SEDA_BIN (default: build
# target/release/seda), EXTRA (more `seda serve` arguments), KEEP (a directory for
# the callgrind.out files).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
N1=${N1:-1000}
N2=${N2:-5000}
CONNS=${CONNS:-4}
WHICH=("$@")
[[ ${#WHICH[@]} -gt 0 ]] || WHICH=(seda ceiling)
if [[ -z "${SEDA_BIN:-}" ]]; then
    (cd "$REPO" && cargo build --release -q -p seda-cli)
    SEDA_BIN="${CARGO_TARGET_DIR:-$REPO/target}/release/seda"
fi
(cd "$REPO/bench/ceiling" && cargo build --release -q)
CEILING_BIN="$REPO/bench/ceiling/target/release/ceiling"
WORK=$(mktemp -d /tmp/seda-cg-haboob.XXXXXX)
OUT=${KEEP:-$WORK}
mkdir -p "$OUT" "$WORK/www"
SERVER_PID=
cleanup() {
    [[ -z "$SERVER_PID" ]] || kill "$SERVER_PID" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
head -c 1024 /dev/urandom >"$WORK/www/1k.bin"

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

run() { # name cmd... ; prints instructions per request
    local name=$1
    shift
    valgrind --tool=callgrind --callgrind-out-file="$OUT/callgrind.out.$name" \
        "$@" >"$WORK/$name.out" 2>"$WORK/$name.err" &
    SERVER_PID=$!
    local addr=
    for _ in $(seq 600); do
        addr=$(sed -n 's#^listening on http://##p' "$WORK/$name.out" | head -1)
        [[ -n "$addr" ]] && break
        sleep 0.1
    done
    [[ -n "$addr" ]] || {
        echo "$name did not start:" >&2
        cat "$WORK/$name.err" >&2
        exit 1
    }
    local host=${addr%:*} port=${addr##*:}
    timeout 600 python3 "$WORK/client.py" "$host" "$port" "$CONNS" 200 # warm-up
    callgrind_control -z "$SERVER_PID" >/dev/null 2>&1
    rm -f "$OUT/callgrind.out.$name".[12]
    timeout 600 python3 "$WORK/client.py" "$host" "$port" "$CONNS" "$N1"
    callgrind_control -d "n1" "$SERVER_PID" >/dev/null 2>&1
    timeout 600 python3 "$WORK/client.py" "$host" "$port" "$CONNS" "$N2"
    callgrind_control -d "n2" "$SERVER_PID" >/dev/null 2>&1
    kill "$SERVER_PID"
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=
    # A dump resets the counters: .1 holds the N1 phase, .2 the N2 phase.
    local a b
    a=$(sed -n 's/^summary: //p' "$OUT/callgrind.out.$name.1")
    b=$(sed -n 's/^summary: //p' "$OUT/callgrind.out.$name.2")
    python3 -c "print('%-10s %10.0f' % ('$name', ($b - $a) / ($N2 - $N1)))"
    mv "$OUT/callgrind.out.$name.1" "$OUT/callgrind.out.$name.n1"
    mv "$OUT/callgrind.out.$name.2" "$OUT/callgrind.out.$name.n2"
}

echo "user-space instructions per request (callgrind), 1 KiB keep-alive, $CONNS connections, N = $N1 and $N2; load: $(cut -d' ' -f1-3 /proc/loadavg)"
for w in "${WHICH[@]}"; do
    case $w in
    seda) run seda "$SEDA_BIN" serve --listen 127.0.0.1:0 --root "$WORK/www" --event-loops 2 \
        --admin-listen none ${EXTRA:-} ;;
    ceiling) run ceiling "$CEILING_BIN" 127.0.0.1:0 2 1024 ;;
    *) echo "unknown: $w" >&2 && exit 2 ;;
    esac
done
