#!/usr/bin/env bash
# Browser tests: headless Debian chromium driven by Playwright for Python. Installs
# what it needs (chromium from Debian, playwright from PyPI; Playwright's own browser
# downloads are never used), builds `seda`, then runs every
# scripts/browser-tests/test_*.py with SEDA_BIN set. Each test starts and stops its
# own servers on loopback.
#
#   scripts/browser-tests.sh            # all tests
#   scripts/browser-tests.sh arashi     # tests whose file name contains "arashi"
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v chromium >/dev/null; then
    apt-get update && apt-get install -y chromium
fi
if ! python3 -c "import playwright.sync_api" 2>/dev/null; then
    python3 -m pip install --quiet playwright
fi
timeout 1200 cargo build -p seda-cli
export SEDA_BIN="$PWD/target/debug/seda"
export CHROMIUM_BIN="${CHROMIUM_BIN:-/usr/bin/chromium}"
passed=0
failed=0
for t in scripts/browser-tests/test_*.py; do
    [[ -n "${1:-}" && "$t" != *"$1"* ]] && continue
    echo "== $t"
    if timeout 300 python3 "$t"; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        echo "FAILED: $t"
    fi
done
echo "browser tests: $passed passed, $failed failed"
[[ $failed -eq 0 && $passed -gt 0 ]]
