//! Every `opledger` command the project writes down — in the README, docs/, the examples, the
//! shipped specs' comments and the scripts — read from where it is written: each names a
//! command the binary has and only flags that command takes; each complete one parses as
//! written and names only files the repository holds; the read-only ones run as written;
//! docs/commands.md names every command and every flag the binary has; and every `OPLEDGER_*`
//! variable they name is one the code reads.

use crate::common::{self, bin, text};
use clap::{CommandFactory, Parser};
use opledger::cli::Cli;
use std::path::{Path, PathBuf};

/// One `opledger` command as a file writes it: where (`file:line`) and its words from the
/// subcommand on (the part a shell would hand to the binary).
#[derive(Debug, Clone)]
pub(crate) struct Written {
    pub place: String,
    /// The words from the subcommand on, as written (before any shell splitting).
    pub rest: String,
    /// A synopsis (`SPECS…`, `[--accept]`, `<id>`, `RUN_DIR`): its flags are checked, not run.
    pub synopsis: bool,
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The files that write commands for a user to type.
fn written_files() -> Vec<PathBuf> {
    let root = root();
    let mut files = vec![root.join("README.md")];
    for dir in ["docs", "examples", "specs", "scripts", ".github"] {
        files.extend(
            common::files_under(&root.join(dir))
                .into_iter()
                .filter(|p| {
                    !p.extension().is_some_and(|e| {
                        ["png", "svg", "json", "lock"].contains(&e.to_str().unwrap_or(""))
                    })
                }),
        );
    }
    files
}

/// The code of a Markdown text, each piece with its first line: fenced blocks a line at a
/// time (a line ending in `\` joined with the next), and inline code spans (which may wrap
/// over a line break). Prose is not code: "opledger is a workspace" names no command.
fn markdown_code(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut prose = String::new();
    let mut prose_lines: Vec<usize> = Vec::new();
    let mut fence: Option<String> = None;
    let mut pending: Option<(usize, String)> = None;
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let trimmed = line.trim_start();
        if let Some(f) = &fence {
            if trimmed.starts_with(f.as_str()) {
                fence = None;
                continue;
            }
            let (start, mut joined) = pending.take().unwrap_or((n, String::new()));
            joined.push_str(line.trim_end_matches('\\'));
            if line.trim_end().ends_with('\\') {
                joined.push(' ');
                pending = Some((start, joined));
            } else {
                out.push((start, joined));
            }
            continue;
        }
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            let marker: String = trimmed
                .chars()
                .take_while(|c| *c == '`' || *c == '~')
                .collect();
            fence = Some(marker);
            continue;
        }
        prose.push_str(line);
        prose.push('\n');
        prose_lines.extend(std::iter::repeat_n(n, line.len() + 1));
    }
    // Inline spans: the text between a run of backticks and the next run of the same length.
    let bytes = prose.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'`' {
            i += 1;
            continue;
        }
        let run = bytes[i..].iter().take_while(|b| **b == b'`').count();
        let open_end = i + run;
        let mut j = open_end;
        let mut close = None;
        while j < bytes.len() {
            if bytes[j] == b'`' {
                let r = bytes[j..].iter().take_while(|b| **b == b'`').count();
                if r == run {
                    close = Some(j);
                    break;
                }
                j += r;
            } else {
                j += 1;
            }
        }
        let Some(close) = close else {
            i = open_end;
            continue;
        };
        let span = prose[open_end..close].replace('\n', " ");
        out.push((prose_lines[i], span.trim().to_string()));
        i = close + run;
    }
    out
}

/// The lines of a script, workflow or spec, each with its number (a line ending in `\` joined
/// with the next, as the shell reads it).
fn plain_code(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut pending: Option<(usize, String)> = None;
    for (i, line) in text.lines().enumerate() {
        let (start, mut joined) = pending.take().unwrap_or((i + 1, String::new()));
        // A continued line of a comment or a YAML block keeps its marker: drop it.
        let piece = if joined.is_empty() {
            line
        } else {
            line.trim_start().trim_start_matches('#').trim_start()
        };
        joined.push_str(piece.trim_end().trim_end_matches('\\'));
        if line.trim_end().ends_with('\\') {
            joined.push(' ');
            pending = Some((start, joined));
        } else {
            out.push((start, joined));
        }
    }
    out
}

/// Whether `word` calls opledger: the binary by name or by path, or the README's cargo form.
fn calls_opledger(words: &[&str], at: usize) -> Option<usize> {
    let w = words[at];
    let w = w.trim_start_matches(['"', '\'', '(']);
    if w == "opledger" || w.ends_with("/opledger") {
        return Some(at + 1);
    }
    // `cargo run --release -- …` and `cargo run --release -q -- …`.
    if w == "cargo" && words.get(at + 1) == Some(&"run") {
        let dashes = words[at..].iter().position(|x| *x == "--")?;
        if words[at + 2..at + dashes]
            .iter()
            .all(|x| x.starts_with('-'))
        {
            return Some(at + dashes + 1);
        }
    }
    None
}

/// `text` with each GitHub Actions expression `${{ … }}` replaced by `1`.
fn github_expressions_filled(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("${{") {
        let Some(end) = rest[at..].find("}}") else {
            break;
        };
        out.push_str(&rest[..at]);
        out.push('1');
        rest = &rest[at + end + 2..];
    }
    out.push_str(rest);
    out
}

/// `NAME=value`: an environment variable set for the command that follows.
fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
    })
}

/// A synopsis with its optional parts (`[--accept]`, nested ones too) left out: what a user
/// types who takes none of them.
fn without_optional(rest: &str) -> String {
    let mut depth = 0usize;
    let mut out = String::new();
    for c in rest.chars() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A synopsis rather than a command to type: optional parts, alternatives, placeholders.
fn is_synopsis(rest: &str) -> bool {
    // A comment after the command is words, not the command's.
    let rest = rest.split(" # ").next().unwrap_or(rest);
    if rest.contains(['[', '…', '<', '{']) || rest.contains("...") {
        return true;
    }
    // A placeholder word (SPEC, RUN_DIR, N, A B) where an argument goes.
    rest.split_whitespace().any(|w| {
        let w = w.trim_matches(|c: char| c == ',' || c == ')' || c == '(');
        !w.is_empty()
            && w.chars().next().is_some_and(|c| c.is_ascii_uppercase())
            && w.chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
    })
}

/// Every `opledger` command of the repository's written files.
pub(crate) fn written_commands() -> Vec<Written> {
    let mut found = Vec::new();
    for file in written_files() {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        let rel = file.strip_prefix(root()).unwrap().display().to_string();
        let markdown = file.extension().is_some_and(|e| e == "md");
        found.extend(commands_of(&text, markdown, &rel));
    }
    found
}

/// The `opledger` commands a file's text writes (Markdown's code, or a script's lines).
fn commands_of(text: &str, markdown: bool, rel: &str) -> Vec<Written> {
    let subcommands = subcommand_names();
    let pieces = if markdown {
        markdown_code(text)
    } else {
        plain_code(text)
    };
    let mut found = Vec::new();
    for (line, piece) in pieces {
        let words: Vec<&str> = piece.split_whitespace().collect();
        for at in 0..words.len() {
            let Some(sub_at) = calls_opledger(&words, at) else {
                continue;
            };
            let Some(sub) = words.get(sub_at) else {
                continue;
            };
            let sub_word = sub.trim_end_matches(['`', '"', '\'', ')', ',', '.', ':']);
            // Only a lowercase word in the subcommand's place is meant as one: a flag, a
            // variable or a path there is another program's argument naming the binary
            // (`--opledger target/release/opledger --simd …`), or the binary's own
            // `--version`.
            if !sub_word.starts_with(|c: char| c.is_ascii_lowercase())
                || !sub_word.chars().all(|c| c.is_ascii_lowercase() || c == '-')
            {
                continue;
            }
            // A word that is not a subcommand is a misspelt one only where the piece is that
            // command (a code span or a line that starts with it); elsewhere it is prose
            // beside code ("where you take opledger from").
            let leads = words[..at].iter().all(|w| *w == "$" || is_assignment(w));
            let meant = subcommands.iter().any(|s| s == sub_word) || (markdown && leads);
            if !meant {
                continue;
            }
            // A workflow's expression (`${{ matrix.shard }}`) is a value the runner fills in:
            // the command is checked with one in its place.
            let rest = github_expressions_filled(&words[sub_at..].join(" "));
            found.push(Written {
                place: format!("{rel}:{line}"),
                synopsis: is_synopsis(&rest),
                rest,
            });
        }
    }
    found
}

/// Every subcommand the binary has, hidden ones included.
fn subcommand_names() -> Vec<String> {
    Cli::command()
        .get_subcommands()
        .map(|s| s.get_name().to_string())
        .collect()
}

/// The long flags `sub` takes (`help` included).
fn long_flags(sub: &clap::Command) -> Vec<String> {
    let mut flags: Vec<String> = sub
        .get_arguments()
        .filter_map(|a| a.get_long().map(str::to_string))
        .collect();
    flags.push("help".into());
    flags
}

/// The part of a command a shell hands to the binary: up to the first shell operator, a
/// comment or a redirection.
fn command_words(rest: &str) -> Result<Vec<String>, String> {
    let mut cut = rest.len();
    let mut quote: Option<char> = None;
    let chars: Vec<(usize, char)> = rest.char_indices().collect();
    for (k, &(i, c)) in chars.iter().enumerate() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '\'' || c == '"' => quote = Some(c),
            None if matches!(c, '|' | ';' | '&' | '>' | '<') => {
                cut = i;
                break;
            }
            None if c == '#' && (k == 0 || chars[k - 1].1.is_whitespace()) => {
                cut = i;
                break;
            }
            None => {}
        }
    }
    let mut head = rest[..cut].trim_end();
    // A redirection of stderr (`2>&1`, `2> log`) leaves its descriptor behind.
    if let Some(h) = head.strip_suffix(" 2") {
        head = h;
    }
    // The command may be the end of a quoted argument of another program (`git bisect run sh
    // -c '… opledger run …'`): its closing quote is not the command's.
    shlex::split(head)
        .or_else(|| shlex::split(head.strip_suffix(['\'', '"'])?))
        .ok_or_else(|| format!("unbalanced quotes in `{head}`"))
}

/// The command a user types from what is written: itself, or a synopsis without its optional
/// parts where no placeholder is left; `None` where a placeholder is left.
fn typed(w: &Written) -> Option<String> {
    if !w.synopsis {
        return Some(w.rest.clone());
    }
    let bare = without_optional(&w.rest);
    (!is_synopsis(&bare)).then_some(bare)
}

/// What is wrong with one written command, if anything: a subcommand the binary lacks, a flag
/// its subcommand does not take, a complete command that does not parse, a file of the
/// repository it names that is not there.
fn problem(w: &Written) -> Option<String> {
    let cli = Cli::command();
    let sub_word = w.rest.split_whitespace().next()?;
    let sub_name = sub_word.trim_end_matches(['`', '"', '\'', ')', ',', '.', ':']);
    let Some(sub) = cli.find_subcommand(sub_name) else {
        return Some(format!(
            "`opledger {sub_name}`: the binary has no such command"
        ));
    };
    let flags = long_flags(sub);
    for word in w.rest.split_whitespace().skip(1) {
        // A comment after the command says what it does in words of its own.
        if word == "#" {
            break;
        }
        let word = word.trim_start_matches(['[', '(', '|']);
        let Some(name) = word.strip_prefix("--") else {
            continue;
        };
        let name: String = name
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-')
            .collect();
        // `-- CMD…`: the worker's command line after the separator.
        if name.is_empty() {
            break;
        }
        if !flags.contains(&name) {
            return Some(format!("`opledger {sub_name}` takes no flag --{name}"));
        }
    }
    // A synopsis is typed as written once its optional parts are left out, where nothing is
    // left to fill in (`opledger check specs/ [--backend cpu|cuda]`).
    let typed = typed(w)?;
    let words = match command_words(&typed) {
        Ok(words) => words,
        Err(e) => return Some(e),
    };
    let argv = std::iter::once("opledger".to_string()).chain(words.iter().cloned());
    match Cli::try_parse_from(argv) {
        Ok(_) => {}
        // A command named in prose with its flags (`opledger check --backend cpu`): its
        // flags parsed; what it runs on is the sentence's.
        Err(e) if e.kind() == clap::error::ErrorKind::MissingRequiredArgument => {}
        Err(e) => return Some(format!("does not parse: {}", e.render().to_string().trim())),
    }
    // Files of the repository it names are there.
    for word in &words[1..] {
        let word = word.trim_end_matches('/');
        if [
            "specs/",
            "examples/",
            "schemas/",
            "docs/",
            "tests/fixtures/",
            "scripts/",
        ]
        .iter()
        .any(|p| word.starts_with(p))
            && !word.contains(['*', '$', '?'])
            && !root().join(word).exists()
        {
            return Some(format!("names {word}, which the repository does not hold"));
        }
    }
    None
}

#[test]
fn every_written_command_names_real_commands_and_flags_and_parses() {
    let written = written_commands();
    // The places the commands are written are all read.
    for place in [
        "README.md",
        "docs/commands.md",
        "docs/counts.md",
        "docs/scale-out.md",
        "examples/slurm/opledger-array.sbatch",
        "examples/k8s/opledger-indexed-job.yaml",
        "examples/github/opledger.yml",
        "scripts/github-action.sh",
    ] {
        assert!(
            written
                .iter()
                .any(|w| w.place.starts_with(&format!("{place}:"))),
            "no command found in {place}"
        );
    }
    let complete = written.iter().filter(|w| !w.synopsis).count();
    assert!(
        complete >= 50 && written.len() - complete >= 30,
        "{complete} complete commands and {} synopses: the reading lost some",
        written.len() - complete
    );
    let problems: Vec<String> = written
        .iter()
        .filter_map(|w| problem(w).map(|p| format!("{}: `opledger {}`: {p}", w.place, w.rest)))
        .collect();
    assert!(
        problems.is_empty(),
        "{} of {} written commands are wrong:\n{}",
        problems.len(),
        written.len(),
        problems.join("\n")
    );
}

/// A wrong command in a doc is found: the reading is checked against commands made wrong.
#[test]
fn a_wrong_written_command_is_found() {
    let wrong = |text: &str, md: bool| -> Vec<String> {
        commands_of(text, md, "x")
            .iter()
            .filter_map(problem)
            .collect()
    };
    assert!(wrong("Run `opledger run specs/ --no-store`.", true).is_empty());
    assert!(
        wrong("Run `opledger run specs/ --no-stores`.", true)[0].contains("no flag --no-stores")
    );
    assert!(wrong("`opledger runn specs/`", true)[0].contains("no such command"));
    assert!(wrong("```\nopledger run SPECS… [--acept]\n```", true)[0].contains("--acept"));
    assert!(
        wrong("```sh\nopledger run specs/nothing-here.yaml\n```", true)[0]
            .contains("does not hold")
    );
    assert!(wrong("`opledger run specs/ --measure often`", true)[0].contains("does not parse"));
    // A continued line of a script, and the part after a pipe is not opledger's.
    assert!(
        wrong("opledger compare a b \\\n  --markdwn c.md || true\n", false)[0]
            .contains("--markdwn")
    );
    assert!(wrong("opledger history --format csv | head -3 > out.csv\n", false).is_empty());
    assert!(wrong("cargo run --release -- run specs/ --no-store", true).is_empty());
    // A workflow step, its expressions filled in.
    assert!(wrong(
        "run: opledger run specs/ --shard hash:${{ matrix.shard }}/3\n",
        false
    )
    .is_empty());
    assert!(wrong(
        "run: opledger run specs/ --shard hash:${{ matrix.shard }}/3 --no-stor\n",
        false
    )[0]
    .contains("--no-stor"));
    assert!(!wrong("`cargo run --release -- rnu specs/`", true).is_empty());
    // Another program's argument naming the binary is not a command.
    assert!(wrong(
        "`bench.py --opledger target/release/opledger --simd avx2`",
        true
    )
    .is_empty());
}

/// The written command `w` as a user types it (a synopsis without its optional parts) and as
/// the binary parses it, where it is complete: its words as a shell hands them over, and the
/// parsed command line.
fn complete(w: &Written) -> Option<(Vec<String>, Cli)> {
    let words = command_words(&typed(w)?).ok()?;
    let argv = std::iter::once("opledger").chain(words.iter().map(String::as_str));
    let cli = Cli::try_parse_from(argv).ok()?;
    Some((words, cli))
}

/// `words` (the written command `w` as a shell hands it over) run from the repository's root
/// and succeed.
fn runs_as_written(w: &Written, words: &[String]) {
    let o = bin().current_dir(root()).args(words).output().unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}: `opledger {}`:\n{}",
        w.place,
        w.rest,
        text(&o)
    );
}

/// The read-only commands written as complete commands run as written from the repository's
/// root and succeed: `check`, `ledger`, `roofline`, `schema` (to standard output).
#[test]
fn the_read_only_written_commands_run_as_written() {
    let mut ran = Vec::new();
    for w in written_commands() {
        // A command named in prose without what it runs on is not a command to run.
        let Some((words, _)) = complete(&w) else {
            continue;
        };
        let read_only = match words[0].as_str() {
            "check" | "ledger" | "roofline" => true,
            "schema" => !words.iter().any(|x| x == "--out"),
            _ => false,
        };
        if read_only {
            runs_as_written(&w, &words);
            ran.push(words.join(" "));
        }
    }
    for needed in ["check", "ledger", "roofline", "schema"] {
        assert!(
            ran.iter().any(|r| r.starts_with(needed)),
            "no written `opledger {needed}` command ran: {ran:?}"
        );
    }
}

/// docs/commands.md names every command the binary shows and every flag each one takes.
#[test]
fn the_command_reference_names_every_command_and_flag() {
    let doc = std::fs::read_to_string(root().join("docs/commands.md")).unwrap();
    let mut missing = Vec::new();
    for sub in Cli::command()
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
    {
        let name = sub.get_name();
        if !doc.contains(&format!("opledger {name}")) {
            missing.push(format!("opledger {name}"));
            continue;
        }
        for flag in long_flags(sub) {
            let hidden = sub
                .get_arguments()
                .any(|a| a.get_long() == Some(flag.as_str()) && a.is_hide_set());
            if flag == "help" || hidden {
                continue;
            }
            let written = doc.contains(&format!("--{flag} "))
                || doc.contains(&format!("--{flag}`"))
                || doc.contains(&format!("--{flag}]"))
                || doc.contains(&format!("--{flag}="))
                || doc.contains(&format!("--{flag},"))
                || doc.contains(&format!("--{flag}\n"))
                || doc.contains(&format!("--{flag})"));
            if !written {
                missing.push(format!("opledger {name} --{flag}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "docs/commands.md does not name: {}",
        missing.join(", ")
    );
}

/// The written `opledger counts` commands that name the repository's specs run as written
/// under Valgrind and succeed: each side's DRAM bytes agree with its ledger.
#[test]
#[cfg_attr(not(has_valgrind), ignore = "needs Valgrind")]
fn the_written_counts_commands_run_as_written() {
    let mut ran: Vec<Vec<String>> = Vec::new();
    for w in written_commands() {
        let Some((
            words,
            Cli {
                command: opledger::cli::Command::Counts { paths, .. },
            },
        )) = complete(&w)
        else {
            continue;
        };
        if ran.contains(&words) {
            continue;
        }
        // A file of the reader's own (`spec.yaml`) is not the repository's to run.
        if !paths.iter().all(|p| root().join(p).exists()) {
            continue;
        }
        runs_as_written(&w, &words);
        ran.push(words);
    }
    for needed in [
        &["counts", "specs/"][..],
        &["counts", "specs/", "--format", "json"],
    ] {
        assert!(
            ran.iter().any(|r| r == needed),
            "the written `opledger {}` did not run: {ran:?}",
            needed.join(" ")
        );
    }
}

/// Every `OPLEDGER_*` variable the README, docs/ and the examples name is one the code reads (a
/// misspelt one would be ignored without a word); a workflow secret's name is not a variable.
#[test]
fn every_written_variable_is_one_the_code_reads() {
    let root = root();
    let mut code = String::new();
    let mut sources = Vec::new();
    for dir in ["src", "crates", "tests", "benches", "scripts", ".ci"] {
        sources.extend(common::files_under(&root.join(dir)));
    }
    sources.extend([root.join("build.rs"), root.join("action.yml")]);
    for f in sources {
        let code_file = f.extension().is_some_and(|e| e != "md") || f.extension().is_none();
        if code_file && !f.starts_with(root.join("tests/documented.rs")) {
            code.push_str(&std::fs::read_to_string(&f).unwrap_or_default());
        }
    }
    let mut unread = Vec::new();
    for file in written_files() {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        for (at, _) in text.match_indices("OPLEDGER_") {
            let name: String = text[at..]
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            let secret = text[..at].ends_with("secrets.") || text[..at].ends_with("secret ");
            if secret || code.contains(&name) {
                continue;
            }
            let line = text[..at].lines().count().max(1);
            unread.push(format!(
                "{}:{line}: {name}",
                file.strip_prefix(root).unwrap().display()
            ));
        }
    }
    assert!(
        unread.is_empty(),
        "variables written that no code reads:\n{}",
        unread.join("\n")
    );
}
