//! The built-in demo site that `seda serve` shows without `--root`: a few pages
//! embedded in the binary, written to a private temporary directory (removed when the
//! [`DemoSite`] is dropped), and a small dynamic handler at `/hello`.

use std::io;
use std::path::Path;

use crate::handler::{HandlerContext, HandlerRegistration, Request, Response};

const INDEX: &str = r#"<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>Haboob on SEDA</title><link rel="stylesheet" href="/style.css"></head>
<body>
<h1>Haboob</h1>
<p>The staged HTTP/1.1 server of SEDA (Welsh, Culler and Brewer, SOSP 2001), in Rust.
Requests flow through stages joined by bounded queues:
HttpParse, HttpRecv, PageCache, CacheMiss, the file helper, HttpSend, and one stage per
dynamic handler.</p>
<h2>Look inside</h2>
<p>The admin listener, on a loopback address of its own (<code>seda serve</code> prints it
as <code>admin at http://ADDR/_seda/</code>), shows:</p>
<ul>
<li><code>/_seda/stats</code>: every stage's queue, threads, counts and response times (JSON)</li>
<li><code>/_seda/graph</code>: the stage graph as observed at run time (Graphviz DOT; <code>graph.json</code> as JSON)</li>
<li><code>/_seda/metrics</code>: the same statistics for Prometheus</li>
</ul>
<h2>Try</h2>
<ul>
<li><a href="/hello?name=SEDA">/hello?name=SEDA</a>: a dynamic handler running in a stage of its own</li>
<li><a href="/about.html">/about.html</a>: a static page from the page cache</li>
<li><a href="/docs">/docs</a>: a directory without its slash (301 to <code>/docs/</code>)</li>
<li><a href="/missing">/missing</a>: a 404</li>
</ul>
</body>
</html>
"#;

const ABOUT: &str = r#"<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>About</title><link rel="stylesheet" href="/style.css"></head>
<body>
<h1>About this server</h1>
<p>Static files are served from a page cache bounded in bytes (LRU), behind Flash's
pathname-translation and response-header caches. Misses go to a blocking CacheMiss
stage with its own thread pool, so the stages that parse and answer never block.</p>
<p>Overload at a dynamic handler's stage becomes <code>503 Service Unavailable</code> with
<code>Retry-After</code>, at once, instead of a refused connection.</p>
<p><a href="/">Back</a></p>
</body>
</html>
"#;

const DOCS_INDEX: &str = r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Docs</title><link rel="stylesheet" href="/style.css"></head>
<body><h1>Docs</h1><p>This page is <code>docs/index.html</code>. <a href="/">Back</a></p></body></html>
"#;

const STYLE: &str = "body{font-family:sans-serif;max-width:42em;margin:2em auto;line-height:1.5;color:#222}\ncode{background:#eee;padding:0 .2em}\n";

/// The demo site's files, as (relative path, contents).
pub const FILES: &[(&str, &str)] = &[
    ("index.html", INDEX),
    ("about.html", ABOUT),
    ("style.css", STYLE),
    ("docs/index.html", DOCS_INDEX),
];

/// The demo site written to a temporary directory; removed on drop.
#[derive(Debug)]
pub struct DemoSite {
    dir: tempfile::TempDir,
}

impl DemoSite {
    /// Writes the demo files to a new temporary directory.
    pub fn create() -> io::Result<DemoSite> {
        let dir = tempfile::Builder::new().prefix("seda-demo-").tempdir()?;
        for (rel, text) in FILES {
            let path = dir.path().join(rel);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(path, text)?;
        }
        Ok(DemoSite { dir })
    }

    /// The directory to serve.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The demo's dynamic handler: `GET /hello?name=X` greets X and shows its stage's
    /// current p90.
    pub fn hello_handler() -> HandlerRegistration {
        HandlerRegistration::new("/hello", |req: &Request, cx: &HandlerContext<'_>| {
            let name = req
                .query_param("name")
                .unwrap_or_else(|| "world".to_owned());
            let name: String = name
                .chars()
                .filter(|c| c.is_alphanumeric() || *c == ' ')
                .take(64)
                .collect();
            let p90 = cx.p90().map_or("n/a".to_owned(), |d| {
                format!("{:.3} ms", d.as_secs_f64() * 1000.0)
            });
            Response::ok(
                "text/html; charset=utf-8",
                format!(
                    "<!doctype html><p>Hello, {name}! Answered by stage <code>{}</code> (p90 {p90}).</p>\n",
                    cx.stage_name()
                ),
            )
        })
    }
}
