#!/usr/bin/env bash
# Two gtk-gnutella 1.2.x ultrapeers with `seda gnutella` between them, one
# connection in each direction, and a third peer (inject.py) whose query reaches a
# gtk node through the router and whose query hit and push come back through it.
# Writes the transcript to OUT (default /tmp/gnutella-interop). Run as root after
# build.sh; gtk-gnutella runs as user "gnut" under a faked 2025 clock (builds over
# two years old refuse ultrapeer mode).
#
# Usage: scripts/gtk-gnutella/interop.sh [OUT]
#   SEDA=path/to/seda to override the binary; WAIT=seconds to hold the connections
#   after the query (default 180: several of gtk's 20 s alive-ping periods).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
SEDA=${SEDA:-$HERE/../../target/release/seda}
OUT=${1:-/tmp/gnutella-interop}
PREFIX=${PREFIX:-/home/gnut/inst}
RUNAS=gnut
WAIT=${WAIT:-180}
FAKE='2025-06-01 12:00:00'
RPORT=16400
HOME_DIR=$(getent passwd "$RUNAS" | cut -d: -f6)
rm -rf "$OUT"; mkdir -p "$OUT"
cp "$SEDA" "$OUT/seda"

gtk() { # gtk N ARGS...: run gtk-gnutella instance N as $RUNAS under faketime
    local n=$1; shift
    su "$RUNAS" -c "cd '$HOME_DIR' && GTK_GNUTELLA_DIR='$HOME_DIR/interop-g$n' faketime '$FAKE' '$PREFIX/bin/gtk-gnutella' $*"
}
shell() { # shell N COMMANDS: one gtk shell session
    printf '%s\nquit\n' "$2" | gtk "$1" --shell 2>&1 | sed '/^100~/d;/^900 /d;/^\.$/d'
}

pids=()
cleanup() {
    # gtk-gnutella runs under su and faketime: stop it by the pid it records.
    for n in 1 2; do
        f="$HOME_DIR/interop-g$n/gtk-gnutella.pid"
        [ -s "$f" ] && kill "$(head -1 "$f")" 2>/dev/null || true
    done
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
}
trap cleanup EXIT

for n in 1 2; do
    d="$HOME_DIR/interop-g$n"
    rm -rf "$d"; mkdir -p "$d"
    # Only what differs from the defaults: ultrapeer, a fixed port, no UDP/DHT/G2,
    # loopback peers allowed, no automatic host fetching, debug logs of nodes.
    cat > "$d/config_gnet" <<CFG
listen_port = $((RPORT + n))
configured_peermode = 2
enable_udp = FALSE
enable_dht = FALSE
enable_g2 = FALSE
allow_private_network_connection = TRUE
stop_host_get = TRUE
is_firewalled = FALSE
force_local_ip = TRUE
forced_local_ip = "127.0.0.1"
up_connections = 2
max_connections = 10
node_debug = 2
vmsg_debug = 1
CFG
    chown -R "$RUNAS:$RUNAS" "$d"
done
share="$HOME_DIR/interop-share"
mkdir -p "$share"; echo "hello from gtk-gnutella" > "$share/seda interop sample.txt"
chown -R "$RUNAS:$RUNAS" "$share"
echo "shared_dirs = \"$share\"" >> "$HOME_DIR/interop-g2/config_gnet"

for n in 1 2; do
    gtk "$n" --no-supervise --no-restart > "$OUT/gtk-g$n.log" 2>&1 &
    pids+=($!)
done
sleep 8
echo "== gtk-gnutella version: $(gtk 1 --version | head -1)" > "$OUT/transcript.txt"

# The router dials g1 itself (outgoing); g2 is told to dial the router (incoming).
RUST_LOG=info,seda_gnutella=debug "$OUT/seda" gnutella --listen 127.0.0.1:$RPORT \
    --peer 127.0.0.1:$((RPORT + 1)) --min-outgoing 1 --stats-every-s 5 \
    > "$OUT/router-stats.jsonl" 2> "$OUT/router.log" &
pids+=($!)
sleep 5
shell 2 "node add 127.0.0.1 $RPORT" >> "$OUT/transcript.txt"
sleep 10
echo "== third peer: query through the router" >> "$OUT/transcript.txt"
python3 "$HERE/inject.py" $RPORT "seda interop" >> "$OUT/transcript.txt" 2>&1
echo "== waiting $WAIT s (alive pings, keep-alive) before reading every side's counters" >> "$OUT/transcript.txt"
sleep "$WAIT"
for n in 1 2; do
    echo "== gtk g$n: nodes" >> "$OUT/transcript.txt"
    shell "$n" "nodes" >> "$OUT/transcript.txt"
    echo "== gtk g$n: non-zero drop counters (stats drop)" >> "$OUT/transcript.txt"
    shell "$n" "stats drop" | awk '$2 != 0' >> "$OUT/transcript.txt"
done
sleep 5
echo "== router: last stats line" >> "$OUT/transcript.txt"
tail -1 "$OUT/router-stats.jsonl" >> "$OUT/transcript.txt"
echo "done: $OUT/transcript.txt"
