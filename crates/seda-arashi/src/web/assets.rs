//! The static assets, served by Haboob's static path (PageCache / CacheMiss, USITS'03
//! Fig. 1: "static page requests are handled by a separate set of stages that
//! maintain an in-memory cache"): the logo, the stylesheet, and `/` which sends the
//! browser on to the folder list. They are written under `www/` at every start.

use std::path::Path;

/// The stylesheet, `/static/arashi.css`.
pub const CSS: &str = r#":root { --ink: #1d2733; --muted: #5d6b7a; --line: #d9e0e7; --accent: #2563a8; --bg: #f4f6f8; }
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--ink); background: var(--bg); }
a { color: var(--accent); text-decoration: none; }
a:hover { text-decoration: underline; }
button, .button { font: inherit; padding: .35em .9em; border: 1px solid var(--accent); border-radius: 4px; background: var(--accent); color: #fff; cursor: pointer; display: inline-block; }
button.secondary { background: #fff; color: var(--accent); }
input, select, textarea { font: inherit; padding: .35em .5em; border: 1px solid var(--line); border-radius: 4px; }
header.top { display: flex; align-items: center; gap: 1em; padding: .5em 1em; background: #fff; border-bottom: 1px solid var(--line); }
.brand { display: flex; align-items: center; gap: .4em; font-weight: 700; font-size: 1.25em; color: var(--ink); }
form.search { flex: 1; display: flex; gap: .4em; max-width: 36em; }
form.search input { flex: 1; }
.user { color: var(--muted); }
.main { display: flex; align-items: flex-start; }
nav.folders { width: 12em; padding: 1em; }
nav.folders ul { list-style: none; padding: 0; margin: 1em 0; }
nav.folders li a { display: block; padding: .3em .5em; border-radius: 4px; color: var(--ink); }
nav.folders li a.current { background: #dce8f5; font-weight: 600; }
nav.folders .all { font-size: .9em; }
main { flex: 1; padding: 1em 1.5em; min-width: 0; }
h1 { font-size: 1.35em; margin: .2em 0 .6em; }
table.mail { width: 100%; border-collapse: collapse; background: #fff; border: 1px solid var(--line); }
table.mail th, table.mail td { text-align: left; padding: .45em .6em; border-bottom: 1px solid var(--line); vertical-align: top; }
table.mail th { background: #eef2f6; font-weight: 600; white-space: nowrap; }
table.mail td.date, table.mail td.num { white-space: nowrap; color: var(--muted); }
table.mail td.subject { overflow-wrap: anywhere; }
tr.unseen td { font-weight: 600; }
.pager { margin: .8em 0; display: flex; gap: 1em; align-items: center; color: var(--muted); }
.notice { background: #e4f4e7; border: 1px solid #9bd0a6; padding: .5em .8em; border-radius: 4px; }
.error { background: #fbe9e9; border: 1px solid #e0a3a3; padding: .5em .8em; border-radius: 4px; }
.message { background: #fff; border: 1px solid var(--line); border-radius: 4px; padding: 1em; }
.message dl { display: grid; grid-template-columns: 6em 1fr; gap: .2em .8em; margin: 0 0 1em; }
.message dt { color: var(--muted); }
.message dd { margin: 0; overflow-wrap: anywhere; }
pre.body { white-space: pre-wrap; overflow-wrap: anywhere; font: 14px/1.5 ui-monospace, "DejaVu Sans Mono", monospace; border-top: 1px solid var(--line); padding-top: 1em; margin: 0; }
.actions { display: flex; gap: .6em; align-items: center; flex-wrap: wrap; margin: .8em 0; }
.actions form { display: flex; gap: .4em; align-items: center; margin: 0; }
form.compose { display: grid; gap: .6em; max-width: 48em; }
form.compose textarea { min-height: 18em; }
mark { background: #ffe58f; }
.snippet { color: var(--muted); font-size: .92em; }
body.bare { display: flex; justify-content: center; padding-top: 8vh; }
.card { background: #fff; border: 1px solid var(--line); border-radius: 6px; padding: 1.5em 2em; width: 24em; }
.card form { display: grid; gap: .6em; }
.hint { color: var(--muted); font-size: .9em; }
"#;

/// The logo, `/static/arashi.svg`: a storm swirl ("arashi" is Japanese for storm).
pub const LOGO: &str = r##"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 64 64" width="64" height="64">
<circle cx="32" cy="32" r="30" fill="#2563a8"/>
<path d="M32 10a22 22 0 1 0 22 22" fill="none" stroke="#fff" stroke-width="5" stroke-linecap="round"/>
<path d="M32 20a12 12 0 1 0 12 12" fill="none" stroke="#9cc3ec" stroke-width="4" stroke-linecap="round"/>
<circle cx="32" cy="32" r="4" fill="#fff"/>
</svg>
"##;

/// `/`: on to the folder list (which sends a visitor without a session to log in).
pub const INDEX: &str = r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="0; url=/folders">
<title>Arashi</title><link rel="stylesheet" href="/static/arashi.css"></head>
<body class="bare"><div class="card"><p><a href="/folders">Continue to Arashi mail</a></p></div></body></html>
"#;

/// Writes the assets under `www` (created if missing).
pub fn write_www(www: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(www.join("static"))?;
    std::fs::write(www.join("index.html"), INDEX)?;
    std::fs::write(www.join("static/arashi.css"), CSS)?;
    std::fs::write(www.join("static/arashi.svg"), LOGO)?;
    Ok(())
}
