#!/usr/bin/env bash
# Installs the backend of `seda experiment proxy`: gunicorn from PyPI into a venv
# (default bench/proxy/.venv, or $1), with the pinned version below. Idempotent;
# prints the gunicorn binary's path. Needs python3 with venv (Debian: python3-venv).
set -euo pipefail
GUNICORN_VERSION=${GUNICORN_VERSION:-27.0.1}
HERE=$(cd "$(dirname "$0")" && pwd)
VENV=${1:-$HERE/.venv}
if [[ ! -x "$VENV/bin/gunicorn" ]] || ! "$VENV/bin/gunicorn" --version 2>/dev/null | grep -q "$GUNICORN_VERSION"; then
    python3 -m venv "$VENV" >&2
    "$VENV/bin/pip" install --quiet --disable-pip-version-check "gunicorn==$GUNICORN_VERSION" >&2
fi
echo "$VENV/bin/gunicorn"
