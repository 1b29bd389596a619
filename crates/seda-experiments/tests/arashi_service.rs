//! End-to-end over loopback: a real Arashi on a small synthetic data directory,
//! driven through its HTTP interface as a browser would.

use std::time::Duration;

use seda_arashi::{Arashi, ArashiConfig, RequestType, SeedPlan};
use seda_load::arashi::{HttpClient, HttpResponse};

fn start(dir: &std::path::Path) -> Arashi {
    let cfg = ArashiConfig::default()
        .with_listen("127.0.0.1:0".parse().unwrap())
        .with_data(dir.join("data"))
        .with_seed(
            SeedPlan::default()
                .with_users(4)
                .with_largest_folder(60)
                .with_hash_iterations(1)
                .with_seed(7),
        )
        .with_stage_threads(2);
    Arashi::start(cfg, &mut |_| {}).unwrap()
}

fn client(a: &Arashi) -> HttpClient {
    HttpClient::new(a.local_addr(), Duration::from_secs(20))
}

fn login(c: &mut HttpClient, user: &str) {
    let r = c
        .post_form(
            "/login",
            &[("user", user), ("password", &format!("{user}-pw"))],
        )
        .unwrap();
    assert_eq!(r.status, 303, "{}", r.text());
    assert_eq!(r.header("location"), Some("/folders"));
}

/// The values of `attr="..."` after each `marker` in a page.
fn all_after(page: &str, marker: &str) -> Vec<String> {
    page.split(marker)
        .skip(1)
        .map(|s| s.chars().take_while(|c| *c != '"' && *c != '&').collect())
        .collect()
}

fn csrf(page: &str) -> String {
    all_after(page, "name=\"csrf\" value=\"")
        .into_iter()
        .next()
        .expect("a CSRF field")
}

fn ok(r: HttpResponse) -> String {
    assert_eq!(r.status, 200, "{}", r.text());
    r.text()
}

#[test]
fn a_user_reads_files_searches_sends_and_logs_out() {
    let dir = tempfile::tempdir().unwrap();
    let a = start(dir.path());
    let mut c = client(&a);

    // Unauthenticated: every page sends the browser to the login form.
    for path in ["/folders", "/list", "/show?id=1", "/search?q=x", "/compose"] {
        let r = c.get(path).unwrap();
        assert_eq!(
            (r.status, r.header("location")),
            (303, Some("/login")),
            "{path}"
        );
    }
    let r = c
        .post_form("/login", &[("user", "user1"), ("password", "wrong")])
        .unwrap();
    assert_eq!(r.status, 401);
    assert!(c.cookie("arashi_session").is_none());
    login(&mut c, "user1");
    let cookie = c.cookie("arashi_session").unwrap().to_owned();
    assert_eq!(cookie.len(), 32);

    let folders = ok(c.get("/folders").unwrap());
    for name in ["Inbox", "Archive", "Sent", "Trash"] {
        assert!(folders.contains(name), "{name}");
    }
    let folder_ids = all_after(&folders, "href=\"/list?folder=");
    let (inbox, archive, sent, trash) = (
        &folder_ids[0],
        &folder_ids[1],
        &folder_ids[2],
        &folder_ids[3],
    );

    // List, sorted by subject and paged.
    let list = ok(c
        .get(&format!("/list?folder={inbox}&sort=subject&order=asc"))
        .unwrap());
    let ids = all_after(&list, "href=\"/show?id=");
    assert!(!ids.is_empty());
    let subjects: Vec<String> = list
        .split("href=\"/show?id=")
        .skip(1)
        .filter_map(|s| {
            s.split_once("\">")
                .and_then(|(_, rest)| rest.split_once("</a>"))
        })
        .map(|(subject, _)| subject.to_lowercase())
        .collect();
    assert_eq!(subjects.len(), ids.len());
    assert!(
        subjects.windows(2).all(|w| w[0] <= w[1]),
        "sorted by subject: {subjects:?}"
    );
    assert!(list.contains("data-pages=\""));

    // Show; then move to Archive, delete to Trash, delete for good.
    let id = ids[0].clone();
    let shown = ok(c.get(&format!("/show?id={id}")).unwrap());
    assert!(shown.contains("<pre class=\"body\">"));
    let token = csrf(&shown);
    let r = c
        .post_form(
            "/move",
            &[
                ("id", &id),
                ("to", archive),
                ("back", inbox),
                ("csrf", &token),
            ],
        )
        .unwrap();
    assert_eq!(r.status, 303, "{}", r.text());
    assert!(
        ok(c.get(&format!("/list?folder={archive}")).unwrap()).contains(&format!("show?id={id}\""))
    );
    let r = c
        .post_form(
            "/delete",
            &[("id", &id), ("back", archive), ("csrf", &token)],
        )
        .unwrap();
    assert_eq!(r.status, 303);
    assert!(
        ok(c.get(&format!("/list?folder={trash}")).unwrap()).contains(&format!("show?id={id}\""))
    );
    let r = c
        .post_form("/delete", &[("id", &id), ("csrf", &token)])
        .unwrap();
    assert_eq!(r.status, 303);
    assert_eq!(
        r.header("location"),
        Some(&*format!("/list?folder={inbox}&notice=removed"))
    );
    assert_eq!(c.get(&format!("/show?id={id}")).unwrap().status, 404);

    // Search (the synthetic corpus says "please" a lot).
    let found = ok(c.get("/search?q=please&in=body").unwrap());
    assert!(
        found.contains("<mark>please</mark>") || found.contains("<mark>Please</mark>"),
        "{found}"
    );

    // Send to user2, with hostile content.
    let evil_subject = "<script>alert('subject')</script>";
    let evil_body = "hi <script>alert(1)</script><img src=x onerror=alert(2)>";
    let r = c
        .post_form(
            "/compose",
            &[
                ("to", "user2"),
                ("subject", evil_subject),
                ("body", evil_body),
                ("csrf", &token),
            ],
        )
        .unwrap();
    assert_eq!(r.status, 303, "{}", r.text());
    assert_eq!(
        r.header("location"),
        Some(&*format!("/list?folder={sent}&notice=sent"))
    );
    let r = c
        .post_form(
            "/compose",
            &[
                ("to", "nobody"),
                ("subject", "s"),
                ("body", "b"),
                ("csrf", &token),
            ],
        )
        .unwrap();
    assert_eq!(r.status, 400);
    assert!(r.text().contains("no local user"));

    let mut c2 = client(&a);
    login(&mut c2, "user2");
    let inbox2 = ok(c2.get("/list").unwrap());
    assert!(inbox2.contains("&lt;script&gt;alert(&#39;subject&#39;)&lt;/script&gt;"));
    assert!(
        !inbox2.contains("<script"),
        "no script tag reaches the page"
    );
    let evil_id = all_after(&inbox2, "href=\"/show?id=")[0].clone();
    let r = c2.get(&format!("/show?id={evil_id}")).unwrap();
    let csp = r.header("content-security-policy").unwrap().to_owned();
    assert!(
        csp.contains("default-src 'none'") && !csp.contains("script-src"),
        "{csp}"
    );
    let page = ok(r);
    assert!(
        page.contains("hi &lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=alert(2)&gt;")
    );
    assert!(!page.contains("<script") && !page.contains("<img src=x"));

    // One user cannot read, move or delete another's message by id.
    assert_eq!(c.get(&format!("/show?id={evil_id}")).unwrap().status, 404);
    let theirs = ids[1].clone();
    assert_eq!(c2.get(&format!("/show?id={theirs}")).unwrap().status, 404);
    let t2 = csrf(&page);
    assert_eq!(
        c2.post_form("/delete", &[("id", &theirs), ("csrf", &t2)])
            .unwrap()
            .status,
        404
    );
    assert_eq!(
        c.get(&format!("/show?id={theirs}")).unwrap().status,
        200,
        "still there"
    );
    // Nor use their session's CSRF token.
    assert_eq!(
        c2.post_form("/delete", &[("id", &evil_id), ("csrf", &token)])
            .unwrap()
            .status,
        403
    );

    // Log out: the session is gone for good, even if the cookie is replayed.
    let r = c.post_form("/logout", &[("csrf", &token)]).unwrap();
    assert_eq!((r.status, r.header("location")), (303, Some("/login")));
    assert!(c.cookie("arashi_session").is_none());
    let mut replay = client(&a);
    replay
        .extra_headers
        .push(("Cookie".into(), format!("arashi_session={cookie}")));
    assert_eq!(replay.get("/folders").unwrap().status, 303);

    // Static stage and the stage graph.
    assert_eq!(c.get("/static/arashi.css").unwrap().status, 200);
    assert!(c.get("/static/arashi.svg").unwrap().text().contains("<svg"));
    // The stage graph is on the admin listener, not the service port.
    assert_eq!(c.get("/_seda/graph").unwrap().status, 404);
    let graph = a.stats_json();
    for t in RequestType::ALL {
        assert!(graph.contains(&t.stage_name()), "{t} in {graph}");
    }
    a.shutdown(Duration::from_secs(2));
}

#[test]
fn malformed_input_gets_400_and_forged_forms_403() {
    let dir = tempfile::tempdir().unwrap();
    let a = start(dir.path());
    let mut c = client(&a);
    login(&mut c, "user3");
    let token = csrf(&ok(c.get("/compose").unwrap()));
    for (path, form) in [
        ("/delete", vec![("id", "abc"), ("csrf", token.as_str())]),
        ("/delete", vec![("id", "-4"), ("csrf", token.as_str())]),
        ("/move", vec![("id", "1"), ("csrf", token.as_str())]),
        ("/compose", vec![("to", "user1"), ("csrf", token.as_str())]),
        ("/login", vec![("user", "user1")]),
    ] {
        let r = c.post_form(path, &form).unwrap();
        assert_eq!(r.status, 400, "{path} {form:?}: {}", r.text());
    }
    for path in [
        "/list?sort=bogus",
        "/list?order=up",
        "/list?page=x",
        "/show?id=",
        "/show?id=1e3",
        "/search?q=a&in=nowhere",
        "/show?id=%zz",
    ] {
        assert_eq!(c.get(path).unwrap().status, 400, "{path}");
    }
    let r = c
        .request("POST", "/delete", Some("text/plain"), b"id=1")
        .unwrap();
    assert_eq!(r.status, 400);
    let r = c
        .request(
            "POST",
            "/delete",
            Some("application/x-www-form-urlencoded"),
            b"id=1&csrf=%ff",
        )
        .unwrap();
    assert_eq!(r.status, 400, "not UTF-8");
    let r = c.post_form("/delete", &[("id", "1")]).unwrap();
    assert_eq!(r.status, 403, "no CSRF token");
    let r = c
        .post_form(
            "/delete",
            &[("id", "1"), ("csrf", "0123456789abcdef0123456789abcdef")],
        )
        .unwrap();
    assert_eq!(r.status, 403, "wrong CSRF token");
    assert_eq!(c.get("/delete").unwrap().status, 405);
    assert_eq!(c.request("PUT", "/list", None, b"").unwrap().status, 405);
    assert_eq!(c.get("/show?id=999999").unwrap().status, 404);
    a.shutdown(Duration::from_secs(2));
}
