#!/usr/bin/env bash
# Tests of bench/lib.sh, on a private lock file (never the real one): one benchmark at a
# time, no deadlock when nested (under quiet-run's inherited descriptor, flock(1), another
# bench script, an ancestor holding the lock on a descriptor it did not pass on), the
# quiet-machine refusal and its override, and background processes that do not keep the
# lock. Each case waits on a condition (a file, the lock), never on a fixed sleep.
# Runs in CI (.ci/run); a few seconds.
set -euo pipefail
LIB=$(cd "$(dirname "$0")" && pwd)/lib.sh
T=$(mktemp -d -t seda-bench-lib-test.XXXXXX)
KIDS=()
trap 'for p in "${KIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$T"' EXIT
export SEDA_BENCH_LOCK=$T/lock SEDA_BENCH_MAX_LOAD=1000000 SEDA_BENCH_WAIT_S=0
unset SEDA_BENCH_IGNORE_LOAD SEDA_BENCH_LOCK_WAIT_S
failures=0
fail() {
    echo "FAIL: $*" >&2
    failures=$((failures + 1))
}
# wait_for FILE: a generous deadline (60 s) for a condition another process sets.
wait_for() {
    for _ in $(seq 600); do
        [[ -e "$1" ]] && return 0
        sleep 0.1
    done
    fail "timed out waiting for $1"
    return 1
}

# A bench script: takes the lock, records how, optionally touches READY and waits for
# RELEASE to exist, optionally runs a nested bench script, optionally spawns a
# background process that outlives it.
cat >"$T/bench.sh" <<EOF
#!/usr/bin/env bash
set -euo pipefail
. "$LIB"
bench_begin "\${NAME:-t}"
echo "how: \$BENCH__LOCKED"
[[ -z "\${READY:-}" ]] || touch "\$READY"
[[ -z "\${RELEASE:-}" ]] || while [[ ! -e "\$RELEASE" ]]; do sleep 0.05; done
[[ -z "\${NEST:-}" ]] || NEST= NAME=inner "\$0"
if [[ -n "\${SPAWN:-}" ]]; then
    bench_spawn sleep 300
    echo \$! >"\$SPAWN"
fi
EOF
chmod +x "$T/bench.sh"
B=$T/bench.sh

# 1. Alone: takes the lock, prints the header and the end line with the exit status.
out=$("$B")
grep -q '^# bench t: .*cores' <<<"$out" || fail "no machine line: $out"
grep -q '^# bench t: load .* at start' <<<"$out" || fail "no load at start: $out"
grep -q '^how: taken$' <<<"$out" || fail "lock not taken: $out"
grep -q '^# bench t: end .*load .* at end; exit 0$' <<<"$out" || fail "no end line: $out"

# 2. Two at once: the second waits, and gives up with 75 when the first holds on.
READY=$T/ready2 RELEASE=$T/release2 "$B" >/dev/null &
holder=$!
KIDS+=("$holder")
wait_for "$T/ready2"
rc=0
err=$(SEDA_BENCH_LOCK_WAIT_S=1 NAME=second "$B" 2>&1 >/dev/null) || rc=$?
[[ $rc == 75 ]] || fail "a second benchmark ran beside the first (exit $rc)"
grep -q 'another benchmark holds' <<<"$err" || fail "no message naming the holder: $err"
grep -q "bench.sh" <<<"$err" || fail "the holder's command line is not shown: $err"
touch "$T/release2"
wait "$holder" || fail "the first benchmark failed"
out=$(SEDA_BENCH_LOCK_WAIT_S=60 NAME=third "$B") || fail "the lock was not released"

# 3. Under quiet-run (the lock on an inherited descriptor): proceeds.
out=$(bash -c 'exec 9>>"$SEDA_BENCH_LOCK"; flock 9; SEDA_BENCH_LOCK_WAIT_S=1 "$1"' _ "$B") ||
    fail "deadlock under an inherited lock descriptor"
grep -q '^how: inherited (fd 9)$' <<<"$out" || fail "inherited lock not noticed: $out"

# 4. Under flock(1): proceeds.
out=$(SEDA_BENCH_LOCK_WAIT_S=1 flock "$SEDA_BENCH_LOCK" "$B") || fail "deadlock under flock(1)"

# 5. A bench script calling another: both proceed.
out=$(SEDA_BENCH_LOCK_WAIT_S=1 NEST=1 "$B") || fail "deadlock of a nested bench script"
grep -q '^# bench inner: end .* exit 0$' <<<"$out" || fail "the nested script did not run: $out"

# 6. An ancestor holds the lock on a descriptor it did not pass on (Python's are
#    close-on-exec): /proc/locks names it, and the script proceeds.
out=$(SEDA_BENCH_LOCK_WAIT_S=1 python3 -c '
import fcntl, os, subprocess, sys
f = open(os.environ["SEDA_BENCH_LOCK"], "a")
fcntl.flock(f, fcntl.LOCK_EX)
sys.exit(subprocess.run([sys.argv[1]]).returncode)' "$B") || fail "deadlock under an ancestor's lock"
grep -q '^how: held by ancestor' <<<"$out" || fail "ancestor's lock not noticed: $out"

# 7. A busy machine: refused with 75 (nothing run, lock free again), or run on the
#    record with SEDA_BENCH_IGNORE_LOAD=1.
rc=0
out=$(SEDA_BENCH_MAX_LOAD=-1 "$B" 2>"$T/err7") || rc=$?
[[ $rc == 75 ]] || fail "ran on a busy machine (exit $rc)"
[[ -z "$out" ]] || fail "a refused run printed: $out"
grep -q 'not running' "$T/err7" || fail "no refusal message: $(cat "$T/err7")"
flock -n "$SEDA_BENCH_LOCK" true || fail "a refused run left the lock held"
out=$(SEDA_BENCH_MAX_LOAD=-1 SEDA_BENCH_IGNORE_LOAD=1 "$B" 2>"$T/err7b") || fail "override did not run"
grep -q 'SEDA_BENCH_IGNORE_LOAD=1' "$T/err7b" || fail "override not said on stderr"
grep -q '^# !!! .*not comparable' <<<"$out" || fail "override not recorded at start: $out"
grep -q 'exit 0; LOAD OVERRIDE' <<<"$out" || fail "override not recorded at end: $out"

# 8. A background process started with bench_spawn does not keep the lock.
SPAWN=$T/spawned "$B" >/dev/null || fail "spawning script failed"
wait_for "$T/spawned"
KIDS+=("$(cat "$T/spawned")")
kill -0 "$(cat "$T/spawned")" || fail "the spawned process is gone already"
flock -n "$SEDA_BENCH_LOCK" true || fail "a spawned process kept the lock"

if [[ $failures -gt 0 ]]; then
    echo "bench/test-lib.sh: $failures failure(s)" >&2
    exit 1
fi
echo "bench/test-lib.sh: all cases passed"
