//! Text another process wrote (a worker's error and output, Valgrind's messages), made safe to
//! print where opledger prints: a terminal and a CI log. Such text is data, never instructions:
//! escape sequences (which move the cursor, retitle the window or hide what follows), other
//! control characters and reordering marks are shown as their code points, and a line that a
//! GitHub runner would read as a workflow command (`::error::…`, `::add-mask::…`, `##[…]`)
//! is printed behind a `| `, so that it reads as what it is and commands nothing.

/// `text` with control characters (but the newline and the tab), C1 controls and bidirectional
/// marks shown as `[U+XXXX]`, and every line that would be a workflow command behind a `| `.
pub fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let line = line.strip_suffix('\r').unwrap_or(line);
        let trimmed = line.trim_start();
        if trimmed.starts_with("::") || line.contains("##[") {
            out.push_str("| ");
        }
        for c in line.chars() {
            if (c.is_control() && c != '\t') || is_bidi_control(c) {
                out.push_str(&format!("[U+{:04X}]", c as u32));
            } else {
                out.push(c);
            }
        }
    }
    out
}

/// The invisible characters that reorder the text around them (embeddings, overrides,
/// isolates, marks): they can make a line, a heading or a table read backwards, so every output
/// shows them as their code points instead.
pub fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200E}' | '\u{200F}' | '\u{061C}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_and_workflow_commands_are_shown_not_obeyed() {
        assert_eq!(printable("plain\ttext\nline two"), "plain\ttext\nline two");
        assert_eq!(
            printable("red \u{1b}[31mtext\u{7}"),
            "red [U+001B][31mtext[U+0007]"
        );
        assert_eq!(printable("::add-mask::x"), "| ::add-mask::x");
        assert_eq!(printable("ok\n   ::error::boom"), "ok\n|    ::error::boom");
        assert_eq!(printable("a ##[error]b"), "| a ##[error]b");
        assert_eq!(printable("crlf\r\nnext"), "crlf\nnext");
        assert_eq!(printable("x\u{202E}y\u{85}"), "x[U+202E]y[U+0085]");
    }
}
