//! The live dashboard at `/_seda/`: one HTML page, a stylesheet, a script and an icon,
//! written by hand and embedded in the binary (no CDN, no build step).
//!
//! The page polls `/_seda/stats` once a second (the [`StatsDoc`](super::StatsDoc) that
//! the experiments read; `/_seda/metrics` is rendered from the same runtime snapshot)
//! and draws, in the browser:
//! - the stage graph as SVG, laid out in layers (cycles broken by a depth-first search
//!   from the entry stages, layers by longest path, order by barycentre sweeps), each
//!   edge as wide as its traffic;
//! - per stage, charts of the last minutes: queue length, threads busy and idle,
//!   admitted and rejected per second, p90 against its target, admission rate, batch
//!   size, and the same per class where a stage has classes.
//!
//! # Edge traffic
//! The runtime counts events per stage, not per edge. The page estimates an edge's
//! traffic by splitting the callee's enqueue rate across its callers in proportion to
//! their processing rates, and says so under the graph. A per-edge counter in the
//! runtime's graph would make this exact.
//!
//! # Bounds
//! Polling keeps the server stateless: each poll is one request on the admin
//! listener, which serves at most [`MAX_CLIENTS`](super::MAX_CLIENTS) connections; a
//! browser that stops reading only ever holds one response. Polls never overlap, and
//! the page's history is bounded.

use crate::handler::Response;
use crate::html::escape;

const PAGE: &str = include_str!("../../assets/dashboard/index.html");
const SCRIPT: &str = include_str!("../../assets/dashboard/dashboard.js");
const STYLE: &str = include_str!("../../assets/dashboard/dashboard.css");
const ICON: &str = include_str!("../../assets/dashboard/dashboard.svg");

/// Where the page lists the admin endpoints.
const ENDPOINTS_MARK: &str = "<!--ENDPOINTS-->";

/// Only our own files, never inline script or style, and fetches to this origin only.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                   connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The dashboard page, listing `links` (paths under `/_seda/`) at its foot.
pub(super) fn page<'a>(links: impl IntoIterator<Item = &'a str>) -> Response {
    let mut list = String::from("<ul>");
    for p in links {
        let p = escape(p);
        list.push_str(&format!("<li><a href=\"{p}\">{p}</a></li>"));
    }
    list.push_str("</ul>");
    let html = PAGE.replacen(ENDPOINTS_MARK, &list, 1);
    Response::ok("text/html; charset=utf-8", html).with_header("Content-Security-Policy", CSP)
}

/// The dashboard's static files, by path.
pub(super) fn asset(path: &[u8]) -> Option<Response> {
    let (content_type, body) = match path {
        b"/_seda/dashboard.js" => ("text/javascript; charset=utf-8", SCRIPT),
        b"/_seda/dashboard.css" => ("text/css; charset=utf-8", STYLE),
        b"/_seda/dashboard.svg" => ("image/svg+xml", ICON),
        _ => return None,
    };
    Some(Response::ok(content_type, body).with_header("X-Content-Type-Options", "nosniff"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(r: &Response) -> String {
        String::from_utf8(r.body.to_vec()).unwrap()
    }

    fn header<'a>(r: &'a Response, name: &str) -> Option<&'a str> {
        r.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn the_page_loads_only_its_own_files_and_lists_the_endpoints() {
        let r = page(["/_seda/stats", "/_seda/x?a=<b>"]);
        let html = body(&r);
        assert!(html.contains("<script src=\"/_seda/dashboard.js\""));
        assert!(html.contains("href=\"/_seda/dashboard.css\""));
        assert!(html.contains("<a href=\"/_seda/stats\">/_seda/stats</a>"));
        assert!(html.contains("/_seda/x?a=&lt;b&gt;"), "escaped");
        assert!(!html.contains(ENDPOINTS_MARK));
        // Nothing from another origin, and no inline script for the policy to allow.
        assert!(!html.contains("http://") && !html.contains("https://"));
        assert!(!html.contains("<script>"));
        assert!(
            header(&r, "Content-Security-Policy")
                .unwrap()
                .contains("script-src 'self'")
        );
        for a in [
            "/_seda/dashboard.js",
            "/_seda/dashboard.css",
            "/_seda/dashboard.svg",
        ] {
            assert!(html.contains(a), "{a} is referenced by the page");
        }
    }

    #[test]
    fn assets_are_served_with_their_types() {
        for (path, ty) in [
            ("/_seda/dashboard.js", "text/javascript"),
            ("/_seda/dashboard.css", "text/css"),
            ("/_seda/dashboard.svg", "image/svg+xml"),
        ] {
            let r = asset(path.as_bytes()).unwrap();
            assert!(
                header(&r, "Content-Type").unwrap().starts_with(ty),
                "{path}"
            );
            assert_eq!(header(&r, "X-Content-Type-Options"), Some("nosniff"));
            assert!(!r.body.is_empty());
        }
        assert!(asset(b"/_seda/dashboard.exe").is_none());
        assert!(asset(b"/_seda/../dashboard.js").is_none());
    }

    #[test]
    fn the_script_reads_the_stats_document_and_fetches_nothing_else() {
        assert!(SCRIPT.contains("fetch('/_seda/stats'"));
        assert_eq!(SCRIPT.matches("fetch(").count(), 1);
        // Server data reaches the DOM as text only.
        assert!(!SCRIPT.contains("innerHTML"));
        assert!(!SCRIPT.contains("eval("));
        // Every field the script reads exists in the stats document.
        let doc = serde_json::to_value(super::super::StatsDoc {
            stages: vec![super::super::StageStats::default()],
            ..Default::default()
        })
        .unwrap();
        let stage = doc["stages"][0].as_object().unwrap();
        for field in [
            "queue_len",
            "capacity",
            "threads_busy",
            "threads_idle",
            "threads",
            "enqueued",
            "admitted",
            "rejected",
            "full",
            "processed",
            "batch_size",
            "rt_p90_ms",
            "rt_target_ms",
            "admission_rate",
            "admission_enabled",
            "thread_model",
            "state",
            "classes",
            "quality",
            "response_time",
        ] {
            assert!(stage.contains_key(field), "stats document lacks {field}");
            assert!(SCRIPT.contains(field), "script does not read {field}");
        }
        for field in ["uptime_ms", "edges", "stages", "shared_workers"] {
            assert!(doc.get(field).is_some(), "{field}");
            assert!(SCRIPT.contains(field), "{field}");
        }
    }
}
