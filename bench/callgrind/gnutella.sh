#!/usr/bin/env bash
# User-space instructions per routed message of the staged Gnutella router and of
# the plain one-thread loop (`seda experiment gnutella-throughput`'s two routers),
# under callgrind, with the experiment's traffic replayed in lock step.
#
# Each router runs alone under callgrind (crates/seda-experiments/examples/
# gnutella_replay.rs: `staged` with the experiment's settings, or `plain`); the
# feeder (the same example, `feed`, not measured) connects PEERS simulated
# ultrapeers over loopback and sends 85 % pings and 15 % queries (TTL 2, 32-byte
# query payloads, fresh GUIDs), BATCH messages per peer per write, and waits for
# every copy of a step before the next (each message at the other peers, each
# ping's pong at its sender): no queue stands, nothing is shed, every message is
# routed once. Counters are zeroed after a warm-up, dumped after N1 and after N2
# more messages, then after IDLE_S idle seconds. The figure is
# (Ir(N2) - Ir(N1)) / (N2 - N1): the cost of one more routed message with set-up
# and teardown cancelled out; "ctl" is the part in seda's controller thread
# (seda::runtime::drive, once per control interval: callgrind runs the router ~50x
# slower, so it weighs ~50x more than at full speed), "idle" the timers' share
# (idle instructions per second times the N2 phase's extra seconds), "net" what is
# left. Then a table by function group and the top functions, in instructions
# per routed message (self cost, N2 minus N1), and the inclusive cost of the
# entry points (the server's framing, the router's batch, the plain loop's
# route_chunk).
#
# What is included: everything both routers run in user space for a message: the
# socket event loops (seda-io, or the plain loop's mio loop), reads, the server
# stage's framing and payload rules, the hop to the router stage (seda's queue,
# batch, stats), routing decisions and tables, the output path (seda-io's Writer
# and writev, or the plain loop's copies and write), allocation and copies. Not
# included: the kernel (system calls are counted as one instruction each), and the
# staged router's shedding under overload (nothing is late in lock step: a message
# shed at the router costs its framing and hop, shown per message read).
#
# Differences from the experiment: the staged router's sockets run on epoll (the
# experiment's default, `auto`, is io_uring on a recent kernel, which valgrind
# cannot run); every thread is serialized by valgrind, so the stages' batches are
# as small as lock step makes them (a read of BATCH messages per peer).
#
# Usage: bench/callgrind/gnutella.sh [staged|plain]...   (default: both)
# Environment: N1 (10240), N2 (40960), WARMUP (262144: the routing tables fill and
# rotate first, as in a long run), IDLE_S (5), PEERS (4),
# BATCH (256), ROUTER_THREADS (2), TOP (25), BIN (a gnutella_replay binary to
# measure instead of building this tree's, for a before/after), KEEP (a directory
# for the callgrind.out files). It takes the benchmark lock (bench/lib.sh) but does
# not wait for a quiet machine.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
. "$REPO/bench/lib.sh"
N1=${N1:-10240}
N2=${N2:-40960}
WARMUP=${WARMUP:-262144}
IDLE_S=${IDLE_S:-5}
TOP=${TOP:-25}
ROUTER_THREADS=${ROUTER_THREADS:-2}
export PEERS=${PEERS:-4} BATCH=${BATCH:-256}
WHICH=("$@")
[[ ${#WHICH[@]} -gt 0 ]] || WHICH=(staged plain)
for w in "${WHICH[@]}"; do
    case $w in
    staged | plain) ;;
    *) echo "gnutella.sh: unknown router '$w' (known: staged plain)" >&2 && exit 2 ;;
    esac
done
bench_lock
VALGRIND=$(bench_need valgrind valgrind)
CALLGRIND_CONTROL=$(bench_need callgrind_control valgrind)
if [[ -z "${BIN:-}" ]]; then
    (cd "$REPO" && cargo build --release -q -p seda-experiments --example gnutella_replay)
    BIN=${CARGO_TARGET_DIR:-$REPO/target}/release/examples/gnutella_replay
fi
WORK=$(mktemp -d -t seda-cg-gnutella.XXXXXX)
OUT=${KEEP:-$WORK}
mkdir -p "$OUT"
SERVER_PID=
stop_server() {
    bench_stop "$SERVER_PID"
    SERVER_PID=
}
cleanup() {
    stop_server
    rm -rf "$WORK"
}
bench_at_exit cleanup
bench_begin --any-load callgrind/gnutella

# run NAME ARGS...: the router NAME under callgrind, fed; leaves its dumps as
# $OUT/callgrind.out.NAME.{n1,n2,idle} and the feeder's phase lines in $WORK/NAME.feed.
run() {
    local name=$1
    shift
    rm -f "$OUT/callgrind.out.$name".*
    bench_spawn "$VALGRIND" --tool=callgrind --compress-strings=no --compress-pos=no \
        --callgrind-out-file="$OUT/callgrind.out.$name" "$BIN" "$@" \
        >"$WORK/$name.out" 2>"$WORK/$name.err"
    SERVER_PID=$!
    local addr=
    for _ in $(seq 600); do
        addr=$(sed -n 's/^listening on //p' "$WORK/$name.out" | head -1)
        [[ -n "$addr" ]] && break
        kill -0 "$SERVER_PID" 2>/dev/null || break
        sleep 0.1
    done
    [[ -n "$addr" ]] || {
        echo "$name did not start:" >&2
        tail -20 "$WORK/$name.err" >&2
        exit 1
    }
    cat >"$WORK/hook" <<HOOK
#!/bin/sh
# warmup: zero the counters; any other phase: dump them (a dump zeroes them too).
if [ "\$1" = warmup ]; then set -- -z; else set -- -d "\$1"; fi
timeout 300 "$CALLGRIND_CONTROL" "\$@" "$SERVER_PID" >"$WORK/control.log" 2>&1 || { cat "$WORK/control.log" >&2; exit 1; }
HOOK
    chmod +x "$WORK/hook"
    timeout 3000 "$BIN" feed "$addr" --hook "$WORK/hook" \
        "warmup=$WARMUP" "n1=$N1" "n2=$N2" "idle=${IDLE_S}s" >"$WORK/$name.feed" || {
        echo "the feeder failed against $name:" >&2
        cat "$WORK/$name.feed" >&2
        tail -20 "$WORK/$name.err" >&2
        exit 1
    }
    stop_server
    # A dump resets the counters: .1 holds the N1 phase, .2 the N2 phase, .3 the idle.
    local k
    for k in 1 2 3; do
        mv "$OUT/callgrind.out.$name.$k" "$OUT/callgrind.out.$name.$(echo n1 n2 idle | cut -d' ' -f$k)"
    done
}

echo "# user-space instructions per routed message (callgrind): $PEERS peers, 85 % pings / 15 % queries, TTL 2, $BATCH messages per peer per write in lock step, N = $N1 and $N2 (after $WARMUP), idle $IDLE_S s; staged: $ROUTER_THREADS router threads; $("$VALGRIND" --version)"
for w in "${WHICH[@]}"; do
    case $w in
    staged) run staged staged "$ROUTER_THREADS" epoll ;;
    plain) run plain plain ;;
    esac
done
python3 "$HERE/gnutella_table.py" "$OUT" "$WORK" "$N1" "$N2" "$TOP" "${WHICH[@]}"
