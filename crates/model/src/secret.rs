//! Secrets in what a user hands in: the password of a store URL (in its userinfo or its query
//! string, where libpq also takes one). Redaction happens where such text enters the program —
//! the store URL when it is parsed, the command line and the environment when they are recorded —
//! so that nothing downstream (archives, reports, the site, error messages, CI logs) ever holds
//! the raw form; only the database connection itself does.
//!
//! The rule for a URL (`scheme://user:password@host/path?k=v&…`): the userinfo's password is
//! replaced by `***`, and so is the value of every query parameter that is not known to be
//! harmless — libpq's `password` and `sslpassword`, and any parameter this list does not know,
//! are treated as secret.

/// What a redacted value is replaced with.
pub const MASK: &str = "***";

/// libpq's connection parameters that carry no secret (names, addresses, paths, modes and
/// timeouts): their values stay readable. Every other parameter's value is masked.
const HARMLESS_PARAMS: &[&str] = &[
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "options",
    "application_name",
    "fallback_application_name",
    "connect_timeout",
    "tcp_user_timeout",
    "client_encoding",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_count",
    "keepalives_retries",
    "sslmode",
    "sslnegotiation",
    "sslcompression",
    "sslcert",
    "sslkey",
    "sslrootcert",
    "sslcrl",
    "sslcrldir",
    "sslsni",
    "requiressl",
    "ssl_min_protocol_version",
    "ssl_max_protocol_version",
    "gssencmode",
    "gsslib",
    "gssdelegation",
    "krbsrvname",
    "channel_binding",
    "require_auth",
    "requirepeer",
    "target_session_attrs",
    "load_balance_hosts",
    "service",
    "passfile",
    "replication",
];

/// The names of this process's environment variables whose values hold a secret by the
/// module's rule (a URL with a password): a child that needs none of them is started without
/// them, so that what it prints (a worker echoing its environment into its output) cannot carry
/// what every other output masks.
pub fn secret_vars() -> Vec<std::ffi::OsString> {
    std::env::vars_os()
        .filter(|(_, v)| {
            let v = v.to_string_lossy();
            redact_text(&v) != v
        })
        .map(|(k, _)| k)
        .collect()
}

/// `text` with every URL in it redacted (see the module's rule); text without `://` comes back
/// as it is. A URL ends at whitespace or a quote.
pub fn redact_text(text: &str) -> String {
    if !text.contains("://") {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        // The scheme: the letters, digits, `+`, `-` and `.` just before `://`.
        let head = &rest[..i];
        let scheme_start = head
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
            .map_or(0, |k| k + 1);
        out.push_str(&head[..scheme_start]);
        let after = &rest[i + 3..];
        let end = after
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '`' | '<' | '>'))
            .unwrap_or(after.len());
        out.push_str(&redact_url(&rest[scheme_start..i + 3 + end]));
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// A URL's parts as redaction sees them: `scheme://[userinfo@]host[path][?query][#fragment]`.
struct Parts<'a> {
    scheme: &'a str,
    /// `user` or `user:password`.
    userinfo: Option<&'a str>,
    host: &'a str,
    path: &'a str,
    /// The query without its fragment (a fragment is never part of a connection).
    query: Option<&'a str>,
}

fn parts(url: &str) -> Option<Parts<'_>> {
    let (scheme, rest) = url.split_once("://")?;
    // The authority ends at the first `/`, `?` or `#`; its userinfo before its last `@`.
    let auth_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(auth_end);
    let (userinfo, host) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    let (path, query) = match tail.split_once('?') {
        Some((p, q)) => (p, Some(q.split('#').next().unwrap_or(""))),
        None => (tail.split('#').next().unwrap_or(""), None),
    };
    Some(Parts {
        scheme,
        userinfo,
        host,
        path,
        query,
    })
}

/// One URL redacted: the userinfo's password and every query value that may be secret.
pub fn redact_url(url: &str) -> String {
    let Some(p) = parts(url) else {
        return url.to_string();
    };
    let userinfo = match p.userinfo.map(|u| (u, u.split_once(':'))) {
        Some((_, Some((user, _)))) => format!("{user}:{MASK}@"),
        Some((user, None)) => format!("{user}@"),
        None => String::new(),
    };
    let mut out = format!("{}://{userinfo}{}{}", p.scheme, p.host, p.path);
    if let Some(q) = p.query {
        let params: Vec<String> = q
            .split('&')
            .map(|kv| match kv.split_once('=') {
                Some((k, _)) if !harmless(k) => format!("{k}={MASK}"),
                Some((k, v)) => format!("{k}={v}"),
                None if harmless(kv) || kv.is_empty() => kv.to_string(),
                // A bare word where a key belongs could itself be a pasted secret.
                None => MASK.to_string(),
            })
            .collect();
        out.push('?');
        out.push_str(&params.join("&"));
    }
    out
}

/// The raw secret values of a URL (its password, the values of its non-harmless parameters,
/// as written and percent-decoded): what a message about the URL must never contain.
pub fn secrets_of(url: &str) -> Vec<String> {
    let Some(p) = parts(url) else {
        return Vec::new();
    };
    let mut out: Vec<String> = p
        .userinfo
        .and_then(|u| u.split_once(':'))
        .map(|(_, password)| password.to_string())
        .into_iter()
        .collect();
    for kv in p.query.unwrap_or("").split('&') {
        match kv.split_once('=') {
            Some((k, v)) if !harmless(k) => out.push(v.to_string()),
            None if !harmless(kv) => out.push(kv.to_string()),
            _ => {}
        }
    }
    let decoded: Vec<String> = out.iter().map(|s| percent_decode(s)).collect();
    out.extend(decoded);
    out.retain(|s| !s.is_empty());
    out.sort();
    out.dedup();
    out
}

/// `message` with every secret of `url` masked, and any URL in it redacted: for text a
/// library wrote about the URL (its errors may quote a value).
pub fn scrub(message: &str, url: &str) -> String {
    let mut m = message.to_string();
    // Longest first, so that a secret containing another is masked whole.
    let mut secrets = secrets_of(url);
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    for s in secrets {
        m = m.replace(&s, MASK);
    }
    redact_text(&m)
}

/// The command line as it may be recorded: every argument redacted as text (a `--store URL`,
/// `--store=URL`, or a URL anywhere else).
pub fn redact_args(args: impl IntoIterator<Item = String>) -> Vec<String> {
    args.into_iter().map(|a| redact_text(&a)).collect()
}

fn harmless(key: &str) -> bool {
    HARMLESS_PARAMS.contains(&percent_decode(key).as_str())
}

/// `%XX` sequences decoded (as libpq reads a URL); anything malformed kept as written.
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let Some(b) = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
            {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_in_userinfo_and_query_are_masked() {
        assert_eq!(
            redact_url("postgres://u:hunter2@db:5432/x"),
            "postgres://u:***@db:5432/x"
        );
        assert_eq!(
            redact_url("postgresql://db/x?user=u&password=hunter2&sslmode=require"),
            "postgresql://db/x?user=u&password=***&sslmode=require"
        );
        // Unknown and percent-encoded keys are secret; a bare word is masked.
        assert_eq!(
            redact_url("postgres://db/x?pass%77ord=a&sslpassword=b&frobnicate=c&zzz"),
            "postgres://db/x?pass%77ord=***&sslpassword=***&frobnicate=***&***"
        );
        // A password holding `@` or `:`: the userinfo ends at the last `@` of the authority.
        assert_eq!(
            redact_url("postgres://u:p@ss:w@db/x"),
            "postgres://u:***@db/x"
        );
        assert_eq!(redact_url("postgres://db/x"), "postgres://db/x");
    }

    #[test]
    fn urls_inside_text_are_redacted_and_secrets_scrubbed() {
        assert_eq!(
            redact_text("--store=postgres://u:s3cret@h/db?password=p4ss tail"),
            "--store=postgres://u:***@h/db?password=*** tail"
        );
        assert_eq!(redact_text("no url here"), "no url here");
        let url = "postgres://u:s%33cret@h/db?password=p4ss";
        let m = scrub("failed: p4ss and s3cret and s%33cret", url);
        assert!(
            !m.contains("p4ss") && !m.contains("s3cret") && !m.contains("s%33"),
            "{m}"
        );
    }
}
