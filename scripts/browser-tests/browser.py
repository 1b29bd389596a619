"""Shared helpers of the browser tests: headless Debian chromium through Playwright,
servers started on loopback and always stopped."""

import os
import re
import socket
import subprocess
import tempfile
import time
from contextlib import contextmanager

from playwright.sync_api import sync_playwright

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@contextmanager
def browser_page(width=1280, height=860):
    """A fresh page of a headless chromium (Debian's binary, never a download)."""
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=os.environ.get("CHROMIUM_BIN", "/usr/bin/chromium"),
            args=CHROMIUM_ARGS,
        )
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            yield page
        finally:
            browser.close()


@contextmanager
def seda_server(args, ready=r"listening on (http://\S+)", timeout=120):
    """Runs `seda ARGS...`, yields the URL it prints, and stops it (SIGTERM, then SIGKILL)."""
    seda = os.environ.get("SEDA_BIN", "target/debug/seda")
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen([seda, *args], stdout=subprocess.PIPE, stderr=log, text=True)
    try:
        deadline = time.time() + timeout
        url = None
        while time.time() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            m = re.search(ready, line)
            if m:
                url = m.group(1)
                break
        if url is None:
            log.seek(0)
            raise RuntimeError(f"seda {' '.join(args)} did not start: {log.read().decode()[-2000:]}")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def free_port():
    """A loopback port free now (for servers that print only their admin address)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(page, js, what, timeout_s=40):
    """Polls the JS expression `js` in `page` until it is true; fails naming `what`."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if page.evaluate(js):
            return
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}")
