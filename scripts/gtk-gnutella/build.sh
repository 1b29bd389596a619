#!/usr/bin/env bash
# Builds gtk-gnutella 1.2.x by hand for the interop run (docs/gnutella/interop.md).
# gtk-gnutella is GPL: its source is fetched and built outside this repository and
# nothing of it is ever committed here.
#
# Usage (as root): scripts/gtk-gnutella/build.sh SRC_DIR [PREFIX]
#   SRC_DIR  an unpacked gtk-gnutella source tree (e.g. tag v1.2.3)
#   PREFIX   install prefix, default /home/gnut/inst
# gtk-gnutella refuses to run as root, so it is built and run as user "gnut".
set -euo pipefail
SRC=${1:?usage: build.sh SRC_DIR [PREFIX]}
PREFIX=${2:-/home/gnut/inst}
RUNAS=gnut
apt-get install -y -qq faketime libglib2.0-dev zlib1g-dev libgnutls28-dev gettext bison pkg-config >/dev/null
id "$RUNAS" >/dev/null 2>&1 || useradd -m "$RUNAS"
HOME_DIR=$(getent passwd "$RUNAS" | cut -d: -f6)
rm -rf "$HOME_DIR/src"
cp -a "$SRC" "$HOME_DIR/src"
# 1.2.3 asserts at start-up (xsort of an empty array) when extra_files/spam_sha1.txt
# holds no hash, as it does when the file's blob is missing from a mirror: give it one.
if ! grep -q '^[A-Z2-7]\{32\}' "$HOME_DIR/src/extra_files/spam_sha1.txt" 2>/dev/null; then
    echo "QLFYWY2RI5WZCTEP6MJKR5CAFGP7FQ5X" > "$HOME_DIR/src/extra_files/spam_sha1.txt"
fi
chown -R "$RUNAS:$RUNAS" "$HOME_DIR/src"
su "$RUNAS" -c "cd '$HOME_DIR/src' && ./build.sh --topless --prefix='$PREFIX' > '$HOME_DIR/build.log' 2>&1 && gmake install >> '$HOME_DIR/build.log' 2>&1"
echo "built: $PREFIX/bin/gtk-gnutella ($(su "$RUNAS" -c "'$PREFIX/bin/gtk-gnutella' --version" | head -1))"
