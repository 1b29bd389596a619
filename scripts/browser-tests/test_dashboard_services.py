"""The live dashboard (/_seda/) of the other services on the runtime, in a real browser
under load: the Gnutella router (`seda gnutella --admin-listen`) and Arashi (`seda
arashi --admin-listen`) mount the same admin listener as Haboob. For each: the stage
graph draws the service's stages with traffic on their edges, the per-stage charts
render and update, the service's own section of /_seda/stats is shown, and nothing
fails in the page.

`scripts/browser-tests.sh services` runs it alone; everything stops by itself within
about 2 minutes. DASHBOARD_SERVICES=gnutella (or arashi) runs one service only;
DASHBOARD_SHOTS=DIR keeps a screenshot of each dashboard there."""

import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from browser import browser_page, free_port, seda_server, wait_for  # noqa: E402

SEDA = os.environ.get("SEDA_BIN", "target/debug/seda")
SHOTS = os.environ.get("DASHBOARD_SHOTS")


def stop(procs):
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def check_dashboard(page, name, stage, nodes, section, problems):
    """The checks every service's dashboard passes while `stage` is under load."""
    wait_for(page, "Number(document.body.dataset.samples || 0) >= 2", f"{name}: the first samples")
    wait_for(page, f"!!document.querySelector('#graph g.node[data-stage=\"{stage}\"]')",
             f"{name}: the {stage} node")
    drawn = page.eval_on_selector_all("#graph g.node", "n => n.map(x => x.dataset.stage)")
    for n in nodes:
        assert n in drawn, f"{name}: {n} missing from the graph: {drawn}"
    wait_for(page, f"""[...document.querySelectorAll('#graph path.edge')]
        .some(e => e.dataset.to === '{stage}' && Number(e.dataset.rate) > 0)""",
             f"{name}: traffic on an edge into {stage}")
    for metric in ["queue", "threads", "flow", "p90", "admission", "batch"]:
        sel = f'.cell[data-stage="{stage}"][data-metric="{metric}"] svg'
        wait_for(page, f"!!document.querySelector('{sel}')", f"{name}: the {metric} chart")
    wait_for(page, f"""Number(document.querySelector(
        '.cell[data-stage="{stage}"][data-metric="flow"]').dataset.value) > 0""",
             f"{name}: events admitted at {stage}")
    # The service's own section of the snapshot is shown beside the runtime's.
    wait_for(page, f"document.body.innerText.includes({section!r})",
             f"{name}: the {section} section")

    def sample():
        return page.evaluate(f"""[Number(document.body.dataset.samples),
            Number(document.body.dataset.uptimeMs),
            document.querySelector('.cell[data-stage="{stage}"][data-metric="flow"] path.s')
                ?.getAttribute('d')]""")
    before = sample()
    time.sleep(3.5)
    after = sample()
    assert after[0] >= before[0] + 2, f"{name}: samples did not grow: {before[0]} -> {after[0]}"
    assert after[1] >= before[1] + 2000, f"{name}: uptime did not advance"
    assert after[2] and after[2] != before[2], f"{name}: the admitted/rejected chart was not redrawn"
    status = page.text_content("#status")
    assert "live" in status, f"{name}: status says {status!r}"
    if problems:
        raise AssertionError(f"{name}: " + "; ".join(problems))


def open_dashboard(page, admin):
    problems = []
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("console", lambda m: m.type == "error" and problems.append(f"console: {m.text}"))
    page.goto(admin)
    return problems


def shot(page, name):
    if SHOTS:
        os.makedirs(SHOTS, exist_ok=True)
        page.screenshot(path=os.path.join(SHOTS, f"dashboard-{name}.png"), full_page=True)


def gnutella():
    port = free_port()
    args = ["gnutella", "--listen", f"127.0.0.1:{port}", "--admin-listen", "127.0.0.1:0",
            "--min-outgoing", "0", "--query-delay-ms", "1"]
    loads = []
    try:
        with seda_server(args, ready=r"admin on (http://\S+/_seda/)stats") as admin, \
                browser_page(width=1440, height=1000) as page:
            problems = open_dashboard(page, admin)
            loads.append(subprocess.Popen(
                [SEDA, "load", "gnutella", "--router", f"127.0.0.1:{port}", "--peers", "8",
                 "--rate", "1500", "--duration-s", "60"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            check_dashboard(page, "gnutella", "GnutellaRouter",
                            ["GnutellaRouter", "GnutellaServer"], "gnutella", problems)
            shot(page, "gnutella")
    finally:
        stop(loads)
    print("dashboard of seda gnutella: graph, charts and updates OK")


def arashi():
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    data = tempfile.mkdtemp(prefix="arashi-dashboard-")
    args = ["arashi", "--listen", f"127.0.0.1:{port}", "--admin-listen", "127.0.0.1:0",
            "--data", data, "--rt-target-ms", "500", "--seed-users", "16",
            "--largest-folder", "200"]
    loads = []
    try:
        with seda_server(args, ready=r"admin at (http://\S+/_seda/)") as admin, \
                browser_page(width=1440, height=1000) as page:
            problems = open_dashboard(page, admin)
            loads.append(subprocess.Popen(
                [SEDA, "load", "arashi", "--url", url, "--users", "24", "--accounts", "16",
                 "--duration", "60s", "--quiet"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            check_dashboard(page, "arashi", "handler:list",
                            ["HttpParse", "handler:login", "handler:list", "handler:show",
                             "handler:search"], "haboob", problems)
            shot(page, "arashi")
    finally:
        stop(loads)
    print("dashboard of seda arashi: graph, charts and updates OK")


def main():
    only = os.environ.get("DASHBOARD_SERVICES", "gnutella,arashi").split(",")
    for name, run in [("gnutella", gnutella), ("arashi", arashi)]:
        if name in only:
            run()


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        print(f"FAILED: {e}", file=sys.stderr)
        sys.exit(1)
