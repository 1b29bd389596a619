# bench/lib.sh: the rules every benchmark script under bench/ follows. Source it (bash),
# then call `bench_begin NAME` before measuring:
#
#   . "$(cd "$(dirname "$0")/.." && pwd)/lib.sh"
#   bench_lock                  # optional: take the lock before building
#   cargo build --release ...
#   bench_begin vs-nginx        # lock (if not yet), wait for a quiet machine, header
#   bench_at_exit 'kill "$SERVER" 2>/dev/null'   # cleanups, run before the end line
#   bench_spawn server ARGS >out &  ...         # background processes without the lock
#
# What it guarantees:
# - One benchmark at a time: an exclusive flock(1) on SEDA_BENCH_LOCK (default
#   ${TMPDIR:-/tmp}/seda-bench.lock, the lock `quiet-run` takes too). Nesting does not
#   deadlock: a script started by a holder of the lock (quiet-run, a bench window,
#   another bench script, `flock LOCKFILE cmd`) proceeds, because either it inherited
#   the descriptor that holds the lock (flock on it succeeds at once) or /proc/locks
#   names an ancestor process as the holder.
# - A quiet machine: once the lock is held, the 1-minute load average must be at most
#   SEDA_BENCH_MAX_LOAD (0.5); it waits up to SEDA_BENCH_WAIT_S seconds (600) for it
#   to fall, then refuses with exit status 75, unless SEDA_BENCH_IGNORE_LOAD=1, which
#   runs anyway and says so on stdout and stderr, at the start and at the end.
#   `bench_begin --any-load` (instruction counts under callgrind, which do not depend
#   on load) takes the lock and records the load but does not wait for it.
# - A record: the date, the commit, the machine (cores, CPU, memory, kernel) and the
#   load average at start and at end, as `# bench ...` lines on stdout.
#
# Environment: SEDA_BENCH_LOCK, SEDA_BENCH_MAX_LOAD (0.5), SEDA_BENCH_WAIT_S (600),
# SEDA_BENCH_LOCK_WAIT_S (how long to wait for another benchmark's lock; 7200),
# SEDA_BENCH_IGNORE_LOAD (1: run even if the machine stays busy).

if [ -z "${BASH_VERSION:-}" ]; then
    echo "bench/lib.sh needs bash" >&2
    exit 2
fi

BENCH_LOCK_FILE=${SEDA_BENCH_LOCK:-${TMPDIR:-/tmp}/seda-bench.lock}
BENCH_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH_LOCK_FD=        # the descriptor that holds the lock in this shell, if any
BENCH__LOCKED=        # how this shell holds the lock (for the record)
BENCH__NAME=${0##*/}
BENCH__T0=
BENCH__OVERRIDE=
BENCH__AT_EXIT=()

bench__say() { echo "bench/lib.sh: $*" >&2; }
bench__load1() { cut -d' ' -f1 /proc/loadavg; }
bench__load3() { cut -d' ' -f1-3 /proc/loadavg; }

# The lock file's identity as /proc/locks prints it: MAJOR:MINOR (hex) and inode.
bench__lock_id() {
    local maj min ino
    read -r maj min ino < <(stat -L -c '%Hd %Ld %i' "$BENCH_LOCK_FILE") || return 1
    printf '%02x:%02x:%s' "$maj" "$min" "$ino"
}

# Is PID this shell or one of its ancestors?
bench__is_ancestor() {
    local p=$$ want=$1
    while [[ -n "$p" && "$p" != 0 ]]; do
        [[ "$p" == "$want" ]] && return 0
        p=$(awk '/^PPid:/ {print $2}' "/proc/$p/status" 2>/dev/null)
    done
    return 1
}

# Processes that have the lock file open (for the message when it is busy).
bench__holders() {
    local id f p seen=""
    id=$(stat -L -c '%d:%i' "$BENCH_LOCK_FILE" 2>/dev/null) || return 0
    for f in /proc/[0-9]*/fd/*; do
        [[ "$(stat -L -c '%d:%i' "$f" 2>/dev/null)" == "$id" ]] || continue
        p=${f#/proc/}
        p=${p%%/*}
        [[ "$p" == "$$" || " $seen " == *" $p "* ]] && continue
        seen+=" $p"
        echo "  pid $p: $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | cut -c1-160)"
    done
}

# Take the benchmark lock (or find that an ancestor holds it). Idempotent.
bench_lock() {
    [[ -n "$BENCH__LOCKED" ]] && return 0
    if ! : >>"$BENCH_LOCK_FILE"; then
        bench__say "cannot open the lock file $BENCH_LOCK_FILE (set SEDA_BENCH_LOCK)"
        exit 2
    fi
    local id fd f pid
    id=$(stat -L -c '%d:%i' "$BENCH_LOCK_FILE")
    # 1. A descriptor inherited from the holder (quiet-run, flock(1), a bench script):
    #    flock on the holding open file description succeeds at once.
    for f in /proc/$$/fd/*; do
        fd=${f##*/}
        [[ "$fd" =~ ^[0-9]+$ && "$fd" -gt 2 ]] || continue
        [[ "$(stat -L -c '%d:%i' "$f" 2>/dev/null)" == "$id" ]] || continue
        if flock -n -x "$fd" 2>/dev/null; then
            BENCH_LOCK_FD=$fd
            BENCH__LOCKED="inherited (fd $fd)"
            return 0
        fi
    done
    # 2. An ancestor holds it on a descriptor we did not inherit.
    local lid
    lid=$(bench__lock_id)
    for pid in $(awk -v id="$lid" '$2 == "FLOCK" && $6 == id {print $5}' /proc/locks); do
        if bench__is_ancestor "$pid"; then
            BENCH__LOCKED="held by ancestor $pid"
            return 0
        fi
    done
    # 3. Take it ourselves, waiting for another benchmark to finish.
    exec {BENCH_LOCK_FD}>>"$BENCH_LOCK_FILE"
    if ! flock -n -x "$BENCH_LOCK_FD"; then
        bench__say "another benchmark holds $BENCH_LOCK_FILE; waiting (at most ${SEDA_BENCH_LOCK_WAIT_S:-7200} s). Processes with it open:"
        bench__holders >&2
        if ! flock -w "${SEDA_BENCH_LOCK_WAIT_S:-7200}" -x "$BENCH_LOCK_FD"; then
            bench__say "gave up waiting for $BENCH_LOCK_FILE; nothing was measured"
            exit 75
        fi
    fi
    BENCH__LOCKED="taken"
}

# Wait (bounded) for the 1-minute load average to fall to SEDA_BENCH_MAX_LOAD.
bench__wait_quiet() {
    local max=${SEDA_BENCH_MAX_LOAD:-0.5} wait_s=${SEDA_BENCH_WAIT_S:-600} start next
    start=$SECONDS
    next=$start
    while awk -v l="$(bench__load1)" -v m="$max" 'BEGIN { exit !(l > m) }'; do
        if ((SECONDS - start >= wait_s)); then
            if [[ "${SEDA_BENCH_IGNORE_LOAD:-}" == 1 ]]; then
                BENCH__OVERRIDE="load $(bench__load1) > $max after ${wait_s} s; run anyway (SEDA_BENCH_IGNORE_LOAD=1): figures of this run are not comparable"
                export SEDA_BENCH_LOAD_OVERRIDE="$BENCH__OVERRIDE"
                local banner="!!! bench/lib.sh: $BENCH__NAME: $BENCH__OVERRIDE !!!"
                echo "$banner" >&2
                echo "# $banner"
                return 0
            fi
            bench__say "load $(bench__load1) still > $max after ${wait_s} s; not running $BENCH__NAME (exit 75). What runs: ps aux --sort=-%cpu | head. SEDA_BENCH_IGNORE_LOAD=1 runs anyway, on the record."
            exit 75
        fi
        if ((SECONDS >= next)); then
            bench__say "load $(bench__load3) > $max; waiting for a quiet machine (at most $((wait_s - SECONDS + start)) s more)"
            next=$((SECONDS + 60))
        fi
        sleep 5
    done
}

bench__machine() {
    local cpu mem
    cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
    mem=$(awk '/^MemTotal:/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)
    echo "$(nproc) cores (${cpu:-unknown CPU}), $mem, $(uname -sr)"
}

bench__commit() {
    local c
    c=$(git -C "$BENCH_REPO" rev-parse --short HEAD 2>/dev/null) || {
        echo "no git"
        return
    }
    git -C "$BENCH_REPO" diff --quiet HEAD -- 2>/dev/null || c+=" + local changes"
    echo "$c"
}

bench__exit() {
    local rc=$? i
    for ((i = ${#BENCH__AT_EXIT[@]} - 1; i >= 0; i--)); do
        eval "${BENCH__AT_EXIT[$i]}" || true
    done
    if [[ -n "$BENCH__T0" ]]; then
        echo "# bench $BENCH__NAME: end $(date -u '+%Y-%m-%d %H:%M:%S UTC') ($((SECONDS - BENCH__T0)) s), load $(bench__load3) at end; exit $rc${BENCH__OVERRIDE:+; LOAD OVERRIDE: $BENCH__OVERRIDE}"
    fi
    return "$rc"
}
trap bench__exit EXIT

# Register a cleanup command (a string for eval), run at exit in reverse order,
# before the end line.
bench_at_exit() { BENCH__AT_EXIT+=("$1"); }

# bench_seda_bin: the `seda` binary to measure in SEDA_BIN: as given, else a release
# build of this checkout, built now.
bench_seda_bin() {
    if [[ -z "${SEDA_BIN:-}" ]]; then
        (cd "$BENCH_REPO" && cargo build --release -q -p seda-cli)
        SEDA_BIN="${CARGO_TARGET_DIR:-$BENCH_REPO/target}/release/seda"
    fi
}

# bench_workdir NAME: raises the open-files limit to the hard limit, makes WORK (a
# new temporary directory named after NAME) and empties PIDS; at exit every process
# in PIDS is killed and reaped and WORK removed.
bench_workdir() {
    ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
    WORK=$(mktemp -d -t "$1.XXXXXX")
    PIDS=()
    bench_at_exit bench__workdir_cleanup
}
bench__workdir_cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$WORK"
}

# Run a command in the background without the lock's descriptor, so that a process
# that outlives the script cannot keep the lock; `$!` is its pid afterwards.
bench_spawn() {
    (
        [[ -n "$BENCH_LOCK_FD" ]] && exec {BENCH_LOCK_FD}>&-
        exec "$@"
    ) &
}

# bench_stop PID: stops a process this shell started (bench_spawn): TERM, then KILL
# if it is still running (not a zombie) after 20 s; waits for it. No PID: nothing.
bench_stop() {
    local pid=${1:-}
    [[ -n "$pid" ]] || return 0
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 200); do
        [[ "$(ps -o stat= -p "$pid" 2>/dev/null)" == [^Z]* ]] || break # gone or a zombie
        sleep 0.1
    done
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}

# bench_need COMMAND PACKAGE: install Debian's PACKAGE (apt-get update first) if
# COMMAND is neither on PATH nor in /usr/sbin. Prints the command's path.
bench_need() {
    local path
    path=$(command -v "$1" 2>/dev/null || true)
    [[ -z "$path" && -x "/usr/sbin/$1" ]] && path=/usr/sbin/$1
    if [[ -z "$path" ]]; then
        bench__say "installing $2 (apt-get) for $1 ..."
        if ! { apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null; }; then
            bench__say "could not install $2 (needs root and a Debian package source); install it and rerun"
            exit 2
        fi
        path=$(command -v "$1" 2>/dev/null || echo "/usr/sbin/$1")
    fi
    echo "$path"
}

# bench_begin [--any-load] NAME: lock, wait for a quiet machine (unless --any-load),
# print the header.
bench_begin() {
    local any_load=
    if [[ "${1:-}" == --any-load ]]; then
        any_load=1
        shift
    fi
    BENCH__NAME=${1:-$BENCH__NAME}
    bench_lock
    local quiet="load must be <= ${SEDA_BENCH_MAX_LOAD:-0.5}"
    if [[ -n "$any_load" ]]; then
        quiet="instruction counts: any load"
    else
        bench__wait_quiet
    fi
    BENCH__T0=$SECONDS
    echo "# bench $BENCH__NAME: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), commit $(bench__commit), $(bench__machine)"
    echo "# bench $BENCH__NAME: load $(bench__load3) at start ($quiet); lock $BENCH_LOCK_FILE $BENCH__LOCKED"
}
