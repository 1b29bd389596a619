//! HTML text: the one escaper of the workspace (the admin dashboard's pages and
//! Arashi's mail pages both go through it).

/// Escapes `s` for HTML element content and for attribute values in either kind of
/// quotes: `&`, `<`, `>`, `"` and `'` become character references; nothing else
/// changes.
///
/// # Examples
///
/// ```
/// use seda_http::html::escape;
///
/// assert_eq!(
///     escape(r#"<a href="x">Tom & 'Jerry'</a>"#),
///     "&lt;a href=&quot;x&quot;&gt;Tom &amp; &#39;Jerry&#39;&lt;/a&gt;"
/// );
/// assert_eq!(escape("plain text, ünïcödé"), "plain text, ünïcödé");
/// ```
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + s.len() / 8);
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}
