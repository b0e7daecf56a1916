//! What apimachinery's proxy `Transport` does to a proxied answer: links in HTML (the attributes
//! of `atomsToAttrs`) and a redirect's `Location` that are absolute paths on the proxied host get
//! the proxy path in front (`/rewriteme` → `/api/v1/namespaces/ns/pods/web/proxy/rewriteme`), so a
//! page served through the apiserver links back through it. Other hosts and relative links stay.

use lol_html::{element, HtmlRewriter, Settings};

/// Tags and the attributes of theirs that hold URLs.
const LINKS: &[(&str, &[&str])] = &[
    ("a", &["href"]),
    ("applet", &["codebase"]),
    ("area", &["href"]),
    ("audio", &["src"]),
    ("base", &["href"]),
    ("blockquote", &["cite"]),
    ("body", &["background"]),
    ("button", &["formaction"]),
    ("command", &["icon"]),
    ("del", &["cite"]),
    ("embed", &["src"]),
    ("form", &["action"]),
    ("frame", &["longdesc", "src"]),
    ("head", &["profile"]),
    ("html", &["manifest"]),
    ("iframe", &["longdesc", "src"]),
    ("img", &["longdesc", "src", "usemap"]),
    ("input", &["src", "usemap", "formaction"]),
    ("ins", &["cite"]),
    ("link", &["href"]),
    ("object", &["classid", "codebase", "data", "usemap"]),
    ("q", &["cite"]),
    ("script", &["src"]),
    ("source", &["src"]),
    ("video", &["poster", "src"]),
];

/// `rewriteURL`: an absolute path (on the proxied host) gets `prepend` in front, unless it has it.
pub fn rewrite_url(link: &str, prepend: &str, upstream_host: &str) -> String {
    let (host, path_and_rest) = match link.strip_prefix("//").or_else(|| link.split_once("://").map(|(_, r)| r)) {
        Some(r) => match r.find('/') {
            Some(i) => (&r[..i], &r[i..]),
            None => (r, ""),
        },
        None => ("", link),
    };
    if (!host.is_empty() && host != upstream_host) || !path_and_rest.starts_with('/') {
        return link.to_string();
    }
    if path_and_rest.starts_with(prepend) {
        return path_and_rest.to_string();
    }
    format!("{}{}", prepend.trim_end_matches('/'), path_and_rest)
}

/// The HTML with its links rewritten.
pub fn rewrite_html(body: &[u8], prepend: &str, upstream_host: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(body.len());
    let mut settings = Settings::new();
    for (tag, attrs) in LINKS {
        settings = settings.append_element_content_handler(element!(*tag, move |el| {
            for a in attrs.iter() {
                if let Some(v) = el.get_attribute(a) {
                    el.set_attribute(a, &rewrite_url(&v, prepend, upstream_host))?;
                }
            }
            Ok(())
        }));
    }
    let mut rewriter = HtmlRewriter::new(settings, |c: &[u8]| out.extend_from_slice(c));
    rewriter.write(body).map_err(|e| e.to_string())?;
    rewriter.end().map_err(|e| e.to_string())?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PREPEND: &str = "/api/v1/namespaces/ns/pods/web/proxy";

    #[test]
    fn absolute_paths_on_the_proxied_host_go_through_the_proxy() {
        assert_eq!(rewrite_url("/rewriteme", PREPEND, "10.0.0.5:80"), format!("{PREPEND}/rewriteme"));
        assert_eq!(rewrite_url("http://10.0.0.5:80/x?y=1", PREPEND, "10.0.0.5:80"), format!("{PREPEND}/x?y=1"));
        assert_eq!(rewrite_url("https://example.com/x", PREPEND, "10.0.0.5:80"), "https://example.com/x");
        assert_eq!(rewrite_url("relative/x", PREPEND, "10.0.0.5:80"), "relative/x");
        assert_eq!(rewrite_url(&format!("{PREPEND}/done"), PREPEND, "h"), format!("{PREPEND}/done"));
    }

    #[test]
    fn html_links_are_rewritten_and_the_rest_kept() {
        let page = br#"<html><body><a href="/rewriteme">test</a> <img src="pic.png"><p>/not-a-link</p></body></html>"#;
        let out = String::from_utf8(rewrite_html(page, PREPEND, "10.0.0.5:80").expect("rewritten")).expect("utf8");
        assert_eq!(
            out,
            format!(
                r#"<html><body><a href="{PREPEND}/rewriteme">test</a> <img src="pic.png"><p>/not-a-link</p></body></html>"#
            )
        );
    }
}
