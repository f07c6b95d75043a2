//! The escaping of text the outputs print that a user controls (spec names, titles, branch
//! names, worker output): for Markdown, for HTML and SVG, and the invisible characters that
//! would reorder either.

/// Escapes text for Markdown: control characters (newlines, ESC) become spaces so a value can
/// start no heading or block, `<` and `&` become entities so no HTML tag or entity passes, `|`
/// is escaped so no table cell breaks, a leading `#` is escaped, and `](` is broken so no link
/// to anywhere but an anchor of the report itself (`](#spec-…)`, which the checklist's evidence
/// uses) forms. The rest (backticks, brackets) renders as written.
pub fn markdown(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    let mut prev = '\0';
    let mut chars = s.chars().peekable();
    let mut first = true;
    while let Some(c) = chars.next() {
        match c {
            c if c.is_control() => o.push(' '),
            c if is_bidi_control(c) => o.push_str(&format!("[U+{:04X}]", c as u32)),
            '<' => o.push_str("&lt;"),
            '&' => o.push_str("&amp;"),
            '|' => o.push_str("\\|"),
            '#' if first => o.push_str("\\#"),
            '(' if prev == ']' && chars.peek() != Some(&'#') => o.push_str("\\("),
            c => o.push(c),
        }
        prev = c;
        first = false;
    }
    o
}

/// `s` as one Markdown code span: shown exactly as written (no entity, since a code span shows
/// `&lt;` as those four characters), fenced by one backtick more than the longest run of them
/// in `s` (so a backtick in a name cannot close the span early), padded where it starts or ends
/// with one; control characters become spaces, the reordering marks their code points, and `|`
/// is escaped so a table cell does not break (GitHub shows it as `|` in a cell).
pub fn code_span(s: &str) -> String {
    span(s, true)
}

/// `s` as a code span outside a table — a command to copy: as [`code_span`], with `|` as
/// written (outside a table a code span would show the escape's backslash).
pub fn command_span(s: &str) -> String {
    span(s, false)
}

fn span(s: &str, in_table: bool) -> String {
    let mut body = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            c if c.is_control() => body.push(' '),
            c if is_bidi_control(c) => body.push_str(&format!("[U+{:04X}]", c as u32)),
            '|' if in_table => body.push_str("\\|"),
            c => body.push(c),
        }
    }
    let mut longest = 0;
    let mut run = 0;
    for c in body.chars() {
        run = if c == '`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    let fence = "`".repeat(longest + 1);
    if body.is_empty() {
        return "` `".into();
    }
    let pad = if body.starts_with('`') || body.ends_with('`') {
        " "
    } else {
        ""
    };
    format!("{fence}{pad}{body}{pad}{fence}")
}

/// Escapes text for HTML (element text and attribute values alike); the invisible characters that
/// reorder text are shown as their code points, as in the Markdown report.
pub fn html(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c if is_bidi_control(c) => o.push_str(&format!("[U+{:04X}]", c as u32)),
            c if c.is_control() && c != '\n' => o.push(' '),
            c => o.push(c),
        }
    }
    o
}

pub use crate::untrusted::is_bidi_control;

#[cfg(test)]
mod code_span_tests {
    use super::code_span;

    #[test]
    fn a_code_span_shows_its_text_as_written_and_cannot_be_closed_by_it() {
        assert_eq!(
            code_span("<rayon::Pool as Drop>::drop"),
            "`<rayon::Pool as Drop>::drop`"
        );
        assert_eq!(code_span("a`b"), "``a`b``");
        assert_eq!(code_span("`x``"), "``` `x`` ```");
        assert_eq!(code_span("a|b\nc"), "`a\\|b c`");
        assert_eq!(code_span(""), "` `");
    }

    #[test]
    fn a_command_span_keeps_pipes_and_is_not_closed_by_a_backtick() {
        use super::command_span;
        // A spec file named with a backtick, quoted by the shell: the span stays one span.
        let cmd = "opledger run 'specs/a`b|c.yaml' --backend cpu";
        assert_eq!(
            command_span(cmd),
            "``opledger run 'specs/a`b|c.yaml' --backend cpu``"
        );
        assert_eq!(command_span("a\nb"), "`a b`");
    }
}
