#!/usr/bin/env bash
# gtk-gnutella 1.2.x as a leaf of `seda gnutella` (issue 28, item 5): the leaf
# connects to the router, sends its query routing table (QRP), and an ultrapeer
# neighbour (queries.py) sends queries through the router, some matching the leaf's
# shared files and some not. The router must forward only the matching ones, and
# the leaf's query hits (and a push back to it) must route. Writes the transcript
# to OUT (default /tmp/gnutella-interop-leaf). Run as root after build.sh;
# gtk-gnutella runs as user "gnut" under a faked 2025 clock, as in interop.sh.
#
# Usage: scripts/gtk-gnutella/interop-leaf.sh [OUT]
#   SEDA=path/to/seda to override the binary; WAIT=seconds to hold the link after
#   the queries (default 90: several of gtk's 20 s alive-ping periods).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
SEDA=${SEDA:-$HERE/../../target/release/seda}
OUT=${1:-/tmp/gnutella-interop-leaf}
PREFIX=${PREFIX:-/home/gnut/inst}
RUNAS=gnut
WAIT=${WAIT:-90}
FAKE='2025-06-01 12:00:00'
RPORT=16400
LPORT=16411
HOME_DIR=$(getent passwd "$RUNAS" | cut -d: -f6)
rm -rf "$OUT"; mkdir -p "$OUT"
cp "$SEDA" "$OUT/seda"
T="$OUT/transcript.txt"

gtk() { # gtk ARGS...: run the leaf instance as $RUNAS under faketime
    su "$RUNAS" -c "cd '$HOME_DIR' && GTK_GNUTELLA_DIR='$HOME_DIR/interop-leaf' faketime '$FAKE' '$PREFIX/bin/gtk-gnutella' $*"
}
shell() { # shell COMMANDS: one gtk shell session
    printf '%s\nquit\n' "$1" | gtk --shell 2>&1 | sed '/^100~/d;/^900 /d;/^\.$/d'
}
router_stats() { # the router's last stats line, the fields that matter here
    tail -1 "$OUT/router-stats.jsonl" | python3 -c '
import json, sys
s = json.loads(sys.stdin.read())
print(json.dumps({k: s[k] for k in ("peers", "leaves", "qrp", "sent", "received", "routed", "dropped")}))
for c in s["connections"]:
    print("connection:", json.dumps(c))'
}

pids=()
cleanup() {
    f="$HOME_DIR/interop-leaf/gtk-gnutella.pid"
    [ -s "$f" ] && kill "$(head -1 "$f")" 2>/dev/null || true
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
}
trap cleanup EXIT

d="$HOME_DIR/interop-leaf"
rm -rf "$d"; mkdir -p "$d"
share="$HOME_DIR/interop-leaf-share"
rm -rf "$share"; mkdir -p "$share"
echo "hello from a gtk-gnutella leaf" > "$share/seda interop sample.txt"
echo "a second shared file" > "$share/ultrapeer leaves routing.ogg"
# Only what differs from the defaults: leaf mode, a fixed port, no UDP/DHT/G2,
# loopback peers allowed, no automatic host fetching, node and QRP debug logs.
cat > "$d/config_gnet" <<CFG
listen_port = $LPORT
configured_peermode = 0
enable_udp = FALSE
enable_dht = FALSE
enable_g2 = FALSE
allow_private_network_connection = TRUE
stop_host_get = TRUE
is_firewalled = FALSE
force_local_ip = TRUE
forced_local_ip = "127.0.0.1"
node_debug = 2
qrp_debug = 2
vmsg_debug = 1
shared_dirs = "$share"
CFG
chown -R "$RUNAS:$RUNAS" "$d" "$share"

gtk --no-supervise --no-restart > "$OUT/gtk-leaf.log" 2>&1 &
pids+=($!)
# Wait (up to 120 s: a busy machine starts it slowly) for its shell socket and its
# query routing table, so that the table exists before it dials.
for _ in $(seq 120); do
    if [ -S "$d/ipc/socket" ] && grep -q 'QRP "Local table" ready' "$OUT/gtk-leaf.log"; then
        break
    fi
    sleep 1
done
{
    echo "== gtk-gnutella version: $(gtk --version | head -1)"
    echo "== leaf shares: $(ls "$share" | paste -sd ',')"
} > "$T"

RUST_LOG=info,seda_gnutella=debug "$OUT/seda" gnutella --listen 127.0.0.1:$RPORT \
    --min-outgoing 0 --stats-every-s 1 \
    > "$OUT/router-stats.jsonl" 2> "$OUT/router.log" &
pids+=($!)
for _ in $(seq 30); do
    grep -q routing "$OUT/router.log" 2>/dev/null && break
    sleep 1
done
echo "== the leaf dials the router" >> "$T"
shell "node add 127.0.0.1 $RPORT" >> "$T"
for _ in $(seq 90); do
    if tail -1 "$OUT/router-stats.jsonl" 2>/dev/null | grep -q '"tables_received":[1-9]'; then
        break
    fi
    sleep 1
done
echo "== router: the leaf and its query routing table" >> "$T"
router_stats >> "$T"
echo "== an ultrapeer neighbour's queries through the router" >> "$T"
python3 "$HERE/queries.py" $RPORT "seda interop" "leaves routing" "zebra quartz" \
    "interop zebra" >> "$T" 2>&1
sleep 3
echo "== router after the queries" >> "$T"
router_stats >> "$T"
echo "== gtk leaf: searches it processed (stats general, local_*)" >> "$T"
shell "stats general" | grep -i "local_" >> "$T" || true
echo "== waiting $WAIT s (alive pings, keep-alive) before reading every side again" >> "$T"
sleep "$WAIT"
echo "== gtk leaf: nodes" >> "$T"
shell "nodes" >> "$T"
echo "== gtk leaf: non-zero drop counters (stats drop)" >> "$T"
shell "stats drop" | awk '$2 != 0' >> "$T"
echo "== router: last stats" >> "$T"
router_stats >> "$T"
# Stop the router as an operator would (SIGTERM): the leaf must hear its Bye.
router=${pids[1]}
kill -TERM "$router"
for _ in $(seq 20); do kill -0 "$router" 2>/dev/null || break; sleep 0.5; done
for _ in $(seq 20); do grep -q 'sent us BYE' "$OUT/gtk-leaf.log" && break; sleep 0.5; done
echo "== gtk leaf log: its table, and the router's Bye when the router stopped (SIGTERM)" >> "$T"
grep -E 'QRP (unique subwords|\[seqno|final table)|supported vendor messages|sent us BYE' \
    "$OUT/gtk-leaf.log" >> "$T" || true
echo "== router log (info and above)" >> "$T"
grep -v ' DEBUG ' "$OUT/router.log" >> "$T" || true
echo "done: $T"
