//! Finding where a key stands in a spec's text, for errors that serde cannot locate (checks that
//! span several fields). Best effort: it follows the key path in order of appearance, in block
//! or flow style, skipping comments; when a key is not found it returns the last one found.

use crate::error::Position;

/// Position of the last key of `path` (e.g. `["workload", "rows"]`), searching each key after
/// the previous one.
pub fn find_key(text: &str, path: &[&str]) -> Option<Position> {
    key_offset(text, path).map(|(at, _)| position_of(text, at))
}

/// Byte offset of the last key of `path` found, and of the end of that key.
fn key_offset(text: &str, path: &[&str]) -> Option<(usize, usize)> {
    let mut from = 0usize;
    let mut found = None;
    for key in path {
        match find_from(text, key, from) {
            Some(offset) => {
                from = offset + key.len();
                found = Some((offset, from));
            }
            None => break,
        }
    }
    found
}

/// Position of `element` (a list item or value as written, e.g. `rows * 2`) after the last key
/// of `path`; the key's own position when the element is not found after it.
pub fn find_element(text: &str, path: &[&str], element: &str) -> Option<Position> {
    let (key_at, from) = key_offset(text, path)?;
    let after = &text[from..];
    // The element on the key's line or the lines of its list: the first occurrence after the
    // key, as a whole token (not inside a longer name).
    let mut search = 0usize;
    while let Some(i) = after[search..].find(element) {
        let at = search + i;
        let prev = after[..at].chars().next_back();
        let next = after[at + element.len()..].chars().next();
        let word = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        if element.is_empty() || (!word(prev) && !word(next)) {
            return Some(position_of(text, from + at));
        }
        search = at + element.len().max(1);
    }
    Some(position_of(text, key_at))
}

fn find_from(text: &str, key: &str, from: usize) -> Option<usize> {
    let mut line_start = 0usize;
    for line in text.split_inclusive('\n') {
        let line_end = line_start + line.len();
        if line_end > from {
            // Strip a comment (a `#` at the start or after white space).
            let code_len = line
                .char_indices()
                .find(|&(i, c)| c == '#' && (i == 0 || line[..i].ends_with([' ', '\t'])))
                .map_or(line.len(), |(i, _)| i);
            let code = &line[..code_len];
            let mut search = 0usize;
            while let Some(i) = code[search..].find(key) {
                let at = search + i;
                let abs = line_start + at;
                let before_ok = at == 0
                    || code[..at].ends_with([' ', '\t', '{', ',', '-'])
                    || code[..at].trim().is_empty();
                let after = code[at + key.len()..].trim_start();
                if abs >= from && before_ok && after.starts_with(':') {
                    return Some(abs);
                }
                search = at + key.len();
            }
        }
        line_start = line_end;
    }
    None
}

fn position_of(text: &str, offset: usize) -> Position {
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
    Position { line, column }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_nested_block_and_flow_keys() {
        let t = "name: a\n# rows: not this\nworkload:\n  kind: x\n  rows: 3\nvariants: {before: a, after: b}\n";
        assert_eq!(
            find_key(t, &["workload", "rows"]),
            Some(Position { line: 5, column: 3 })
        );
        assert_eq!(
            find_key(t, &["variants", "after"]),
            Some(Position {
                line: 6,
                column: 23
            })
        );
        assert_eq!(
            find_key(t, &["name"]),
            Some(Position { line: 1, column: 1 })
        );
    }

    #[test]
    fn finds_list_elements_after_their_key() {
        let t = "variants:\n  after:\n    cuda:\n      block: [256]\n      grid: [rows, cols2]\n      args: [y, x]\n";
        assert_eq!(
            find_element(t, &["variants", "after", "cuda", "grid"], "cols2"),
            Some(Position {
                line: 5,
                column: 20
            })
        );
        // `x` is found as a word, not inside another name.
        assert_eq!(
            find_element(t, &["variants", "after", "cuda", "args"], "x"),
            Some(Position {
                line: 6,
                column: 17
            })
        );
    }

    #[test]
    fn missing_key_gives_parent() {
        let t = "workload:\n  kind: x\n";
        assert_eq!(
            find_key(t, &["workload", "rows"]),
            Some(Position { line: 1, column: 1 })
        );
        assert_eq!(find_key(t, &["nothing"]), None);
    }
}
