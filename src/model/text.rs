//! Cutting tools' output down to what a record, a message or a prompt keeps.

/// Whether `c` would be obeyed by a terminal rather than shown: C0 controls
/// other than newline and tab (ESC among them), DEL, and the 8-bit C1 set.
fn is_control(c: char) -> bool {
    (c < ' ' && c != '\n' && c != '\t') || ('\u{7f}'..='\u{9f}').contains(&c)
}

/// `text` made inert for a terminal: each control character (see
/// [`is_control`]) is written out as its escape, `\u001b` — visible, and
/// valid inside a JSON string, so the same filter serves text and `--json`
/// output. A title change, a screen clear or an OSC 52 clipboard write in a
/// summary, a goal or a model's answer prints as text and does nothing.
pub fn inert(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(is_control) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if is_control(c) {
            out.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// `text` with each control character (see [`is_control`]) replaced by
/// `�`, one character for one: for text quoted with a column pointer
/// (diagnostics), where an escape would shift the columns.
pub fn inert_in_place(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(is_control) {
        return std::borrow::Cow::Borrowed(text);
    }
    std::borrow::Cow::Owned(
        text.chars()
            .map(|c| if is_control(c) { '\u{fffd}' } else { c })
            .collect(),
    )
}

/// The first non-empty line of `text` (empty when there is none).
pub fn first_line(text: &str) -> &str {
    text.lines().find(|l| !l.trim().is_empty()).unwrap_or("")
}

/// One line for a failure message made by [`with_evidence`]: how the command
/// ended and the first line of its evidence that carries an error (else the
/// evidence's last line).
pub fn headline(message: &str) -> String {
    let mut lines = message.lines().filter(|l| !l.trim().is_empty());
    let first = lines.next().unwrap_or("");
    let rest: Vec<&str> = lines.collect();
    if rest.is_empty() {
        return first.to_string();
    }
    // A test runner's line naming the failed test says most; then the first
    // error line that is not a banner (`===== FAILURES =====`).
    let names_test = |l: &&&str| {
        let t = l.trim_start();
        t.starts_with("FAILED ") || t.starts_with("--- FAIL") || t.ends_with("... FAILED") || t.ends_with(" ... FAILED")
    };
    // A Python traceback's key line is the exception after its frames.
    let raised = rest
        .iter()
        .position(|l| l.trim_start().starts_with("Traceback (most recent call last)"))
        .and_then(|i| rest[i + 1..].iter().find(|l| !l.starts_with([' ', '\t'])));
    let key = rest
        .iter()
        .find(names_test)
        .or(raised)
        .or_else(|| rest.iter().find(|l| carries_error(l) && !is_banner(l)))
        .or_else(|| rest.iter().find(|l| carries_error(l)))
        .or(rest.last())
        .copied()
        .unwrap_or("");
    format!("{} {}", first.trim_end(), key.trim())
}

/// Whether a line is decoration around a few words (`===== FAILURES =====`,
/// `____ test_b ____`, `!!!! stopping after 1 failures !!!!`): mostly, or
/// framed by, `=`, `-`, `_`, `*`, `#` or `!`.
fn is_banner(line: &str) -> bool {
    let t = line.trim();
    let decorative = |c: &char| matches!(c, '=' | '-' | '_' | '*' | '#' | '!');
    let decoration = t.chars().filter(decorative).count();
    let framed = t.chars().take_while(decorative).count() >= 3 && t.chars().rev().take_while(decorative).count() >= 3;
    t.starts_with(['=', '-', '_', '*', '#', '!']) && (framed || decoration * 2 >= t.chars().count())
}

/// The last `n` non-empty lines of `output`, joined by line breaks.
pub fn last_lines(output: &str, n: usize) -> String {
    let lines: Vec<&str> = output.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The most a binding's summary keeps, in bytes.
pub const SUMMARY_MAX: usize = 1_024;

/// The most a failure message keeps, in bytes (the output it quotes included).
pub const MESSAGE_MAX: usize = 4_096;

/// `text` cut to its first `max` bytes (never inside a character), with a
/// note of how much was cut, so that a cut is visible.
pub fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… [{} bytes cut]", &text[..end], text.len() - end)
}

/// `text` kept to `max` bytes: its head and its tail, cut at line breaks
/// when near, with a note of how much of the middle was left out.
pub fn head_tail(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let half = max / 2;
    let mut end = half;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let head = match text[..end].rfind('\n') {
        Some(i) if i > half / 2 => &text[..=i],
        _ => &text[..end],
    };
    let last = tail(text, max - half);
    let left_out = text.len() - head.len() - last.len();
    format!("{head}… [{left_out} bytes left out] …\n{last}")
}

/// The most output a failure message quotes, in bytes.
pub const MESSAGE_TAIL: usize = 2_000;

/// The last `max` bytes of `text`, cut after a line break when one is near.
pub fn tail(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    let cut = &text[start..];
    match cut.find('\n') {
        Some(i) if i + 1 < cut.len() => cut[i + 1..].to_string(),
        _ => cut.to_string(),
    }
}

/// Whether a line of a tool's output carries an error: it names an error, a
/// failure, a panic, a traceback, an exception or an assertion. Counts of
/// nothing (`0 failed`, `0 errors`) do not.
pub fn carries_error(line: &str) -> bool {
    const WORDS: [&str; 9] = [
        "error",
        "fail",
        "panic",
        "traceback",
        "exception",
        "assert",
        "fatal",
        "abort",
        "not found",
    ];
    let lower = line.to_ascii_lowercase();
    WORDS.iter().any(|word| {
        lower.match_indices(word).any(|(at, _)| {
            let before = lower[..at].trim_end();
            // "0 failed", "0 errors", "failed: 0" are counts of nothing.
            let after = lower[at + word.len()..].trim_start_matches(|c: char| c.is_ascii_alphabetic());
            let zero = |rest: &str| rest.starts_with('0') && !rest[1..].starts_with(|c: char| c.is_ascii_digit());
            !(before.ends_with(" 0") || before == "0" || after.strip_prefix(": ").is_some_and(zero))
        })
    })
}

/// The most a failure message quotes of a tool's output, in bytes.
pub const EVIDENCE_MAX: usize = 3_584;

/// `what` (how the command ended), followed by the evidence in `output`:
/// the lines that carry the error with their context, the first lines and the
/// last ones, in output order with `…` where lines were left out — at most
/// [`EVIDENCE_MAX`] bytes, since the message travels into the journal, the
/// trail and the next attempt's correction.
pub fn with_evidence(what: String, output: &str) -> String {
    let evidence = evidence(output, EVIDENCE_MAX);
    if evidence.is_empty() {
        what
    } else if evidence.contains('\n') {
        format!("{what}:\n{evidence}")
    } else {
        format!("{what}: {evidence}")
    }
}

/// The lines of `output` worth showing someone who must fix what failed,
/// within `budget` bytes. Chosen greedily in this order, each group taken only
/// if it fits: the last 5 lines (where most tools summarise), every line that
/// [`carries_error`] with 2 lines before it and 3 after (a Python traceback
/// through its exception line), the first 3 lines, then up to 10 more lines
/// of the tail.
pub fn evidence(output: &str, budget: usize) -> String {
    let lines: Vec<&str> = output.lines().collect();
    let filled: Vec<usize> = (0..lines.len()).filter(|&i| !lines[i].trim().is_empty()).collect();
    if filled.is_empty() {
        return String::new();
    }
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let tail_from = |n: usize| filled[filled.len().saturating_sub(n)..].to_vec();
    groups.push(tail_from(5));
    let mut i = 0;
    while i < lines.len() {
        if !carries_error(lines[i]) {
            i += 1;
            continue;
        }
        let start = i.saturating_sub(2);
        let mut end = (i + 3).min(lines.len() - 1);
        if lines[i].contains("Traceback") {
            // The frames are indented; the exception line that ends it is not.
            let mut j = i + 1;
            while j < lines.len() && j < i + 40 {
                let line = lines[j];
                if !line.trim().is_empty() && !line.starts_with([' ', '\t']) {
                    break;
                }
                j += 1;
            }
            end = end.max(j.min(lines.len() - 1));
        }
        groups.push((start..=end).filter(|&k| !lines[k].trim().is_empty()).collect());
        i = end + 1;
    }
    groups.push(filled.iter().copied().take(3).collect());
    groups.push(tail_from(15));

    let mut chosen = std::collections::BTreeSet::new();
    let mut used = 0;
    for group in groups {
        let new: Vec<usize> = group.into_iter().filter(|k| !chosen.contains(k)).collect();
        // Each line costs its bytes and a line break; a gap costs a `…` line.
        let cost: usize = new.iter().map(|&k| lines[k].len() + 1).sum::<usize>() + 4;
        if used + cost <= budget {
            used += cost;
            chosen.extend(new);
        } else if chosen.is_empty() {
            // Not even the tail fits: its last bytes will.
            return tail(&new.iter().map(|&k| lines[k]).collect::<Vec<_>>().join("\n"), budget);
        }
    }
    let mut out = String::new();
    let mut previous: Option<usize> = None;
    for &k in &chosen {
        let gap = match previous {
            None => k > filled[0],
            Some(p) => filled.iter().any(|&f| f > p && f < k),
        };
        if gap {
            out.push_str("…\n");
        }
        out.push_str(lines[k]);
        out.push('\n');
        previous = Some(k);
    }
    out.truncate(out.trim_end().len());
    out
}

/// A word as a shell reads it back: as it is when it holds only safe
/// characters, else in single quotes.
pub fn shell_word(word: &str) -> String {
    let safe = !word.is_empty()
        && word.chars().all(|c| {
            c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '/' | '-' | '+' | '=' | ':' | '@' | '%' | ',')
        });
    if safe {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inert_text_shows_every_control_a_terminal_would_obey_and_keeps_the_rest() {
        // OSC 52 (clipboard write), a title change, a screen clear, 8-bit CSI, DEL, CR.
        let hostile = "a\u{1b}]52;c;ZWNobyBoaQ==\u{7}b\u{1b}]0;owned\u{7}\u{1b}[2Jc\u{9b}31md\u{7f}\r";
        let shown = inert(hostile);
        assert!(!shown.chars().any(is_control), "{shown:?}");
        assert_eq!(
            shown,
            "a\\u001b]52;c;ZWNobyBoaQ==\\u0007b\\u001b]0;owned\\u0007\\u001b[2Jc\\u009b31md\\u007f\\u000d"
        );
        // Newlines, tabs and every printable character (accents, CJK, emoji) stay.
        let plain = "line 1\n\tline 2 — café 日本 🎉";
        assert!(matches!(inert(plain), std::borrow::Cow::Borrowed(_)));
        // What JSON output becomes is still JSON, and says the same.
        let json = serde_json::to_string(&serde_json::json!({"s": hostile})).unwrap();
        let back: serde_json::Value = serde_json::from_str(&inert(&json)).unwrap();
        assert_eq!(back["s"], hostile);
    }

    #[test]
    fn a_headline_names_the_failed_test_rather_than_a_banner() {
        let pytest = "exit 1:\n============ FAILURES ============\n____ test_b ____\nE   AssertionError: assert 1 == 2\n==== short test summary info ====\nFAILED test_six.py::test_b - AssertionError: assert 1 == 2\n==== 1 failed, 200 passed in 1.2s ====";
        assert_eq!(
            headline(pytest),
            "exit 1: FAILED test_six.py::test_b - AssertionError: assert 1 == 2"
        );
        let cargo = "exit 101:\nrunning 3 tests\ntest a ... ok\ntest b ... FAILED\nfailures:";
        assert_eq!(headline(cargo), "exit 101: test b ... FAILED");
        let banner_then_error = "exit 1:\n===== ERRORS =====\nImportError: no module named x";
        assert_eq!(headline(banner_then_error), "exit 1: ImportError: no module named x");
        let traceback = "exit 1:\nTraceback (most recent call last):\n  File \"<string>\", line 1, in <module>\nIndexError: tuple index out of range\nnoise";
        assert_eq!(headline(traceback), "exit 1: IndexError: tuple index out of range");
        let stopping = "exit 1:\n!!!!!!!!!! stopping after 1 failures !!!!!!!!!!\nE   assert 1 == 2";
        assert_eq!(headline(stopping), "exit 1: E   assert 1 == 2");
    }

    #[test]
    fn a_shell_word_is_quoted_only_when_it_must_be() {
        assert_eq!(shell_word("src/a.rs"), "src/a.rs");
        assert_eq!(shell_word("my notes.txt"), "'my notes.txt'");
        assert_eq!(shell_word("it's"), "'it'\\''s'");
        assert_eq!(shell_word(""), "''");
    }

    #[test]
    fn tail_cuts_at_a_line_break_and_never_inside_a_character() {
        assert_eq!(tail("short", 10), "short");
        assert_eq!(tail("one\ntwo\nthree", 9), "three");
        let cut = tail("ééééé", 3);
        assert!(cut.len() <= 3 && cut.chars().all(|c| c == 'é'), "{cut:?}");
    }

    #[test]
    fn cut_keeps_the_head_and_says_what_it_dropped() {
        assert_eq!(cut("short", 10), "short");
        assert_eq!(cut("abcdef", 4), "abcd… [2 bytes cut]");
        assert_eq!(cut("éé", 3), "é… [2 bytes cut]");
    }

    #[test]
    fn lines_skip_blanks() {
        assert_eq!(first_line("\n  \nfirst\nsecond"), "first");
        assert_eq!(last_lines("a\n\nb\nc\n\n", 2), "b\nc");
        assert_eq!(with_evidence("exit 1".into(), "\n"), "exit 1");
        assert_eq!(with_evidence("exit 1".into(), "boom\n"), "exit 1: boom");
        let long = "x".repeat(10 * EVIDENCE_MAX);
        assert_eq!(
            with_evidence("exit 1".into(), &long).len(),
            "exit 1: ".len() + EVIDENCE_MAX
        );
    }

    #[test]
    fn errors_are_told_from_counts_of_nothing() {
        for line in [
            "error[E0308]: mismatched types",
            "FAILED tests/test_slug.py::test_unicode - AssertionError",
            "thread 'main' panicked at src/lib.rs:3:5",
            "Traceback (most recent call last):",
            "bash: cargo: command not found",
            "test result: FAILED. 3 passed; 1 failed",
        ] {
            assert!(carries_error(line), "{line}");
        }
        for line in [
            "test result: ok. 5 passed; 0 failed; 0 ignored",
            "collected 12 items",
            "errors: 0",
        ] {
            assert!(!carries_error(line), "{line}");
        }
    }

    #[test]
    fn evidence_keeps_a_traceback_whole_far_from_the_end() {
        let mut output = String::from("============ test session starts ============\nplatform linux\n");
        output.push_str("Traceback (most recent call last):\n  File \"slug.py\", line 40, in slugify\n    text = unidecode(text)\n  File \"slug.py\", line 12, in unidecode\n    return table[c]\nKeyError: 'é'\n");
        for i in 0..400 {
            output.push_str(&format!("log line {i} of a chatty tool\n"));
        }
        output.push_str("1 failed, 11 passed in 0.31s\n");
        let evidence = evidence(&output, EVIDENCE_MAX);
        assert!(evidence.len() <= EVIDENCE_MAX, "{}", evidence.len());
        for needle in [
            "Traceback",
            "line 12, in unidecode",
            "KeyError: 'é'",
            "1 failed, 11 passed",
            "test session starts",
        ] {
            assert!(evidence.contains(needle), "`{needle}` in:\n{evidence}");
        }
        assert!(evidence.contains("…"), "gaps are marked:\n{evidence}");
        assert!(!evidence.contains("log line 200"), "{evidence}");
    }

    #[test]
    fn evidence_finds_the_failing_test_above_cargos_summary() {
        let mut output = String::from("running 300 tests\n");
        for i in 0..150 {
            output.push_str(&format!("test tests::case_{i} ... ok\n"));
        }
        output.push_str("test tests::slug_keeps_unicode ... FAILED\n");
        for i in 150..300 {
            output.push_str(&format!("test tests::case_{i} ... ok\n"));
        }
        output.push_str("\nfailures:\n\n---- tests::slug_keeps_unicode stdout ----\nthread 'tests::slug_keeps_unicode' panicked at src/lib.rs:88:9:\nassertion `left == right` failed\n  left: \"caf\"\n right: \"cafe\"\n");
        for i in 0..100 {
            output.push_str(&format!("note: context line {i}\n"));
        }
        output.push_str(
            "\nfailures:\n    tests::slug_keeps_unicode\n\ntest result: FAILED. 299 passed; 1 failed; 0 ignored\n",
        );
        let evidence = evidence(&output, EVIDENCE_MAX);
        for needle in [
            "test tests::slug_keeps_unicode ... FAILED",
            "panicked at src/lib.rs:88:9",
            "left: \"caf\"",
            "test result: FAILED. 299 passed; 1 failed",
        ] {
            assert!(evidence.contains(needle), "`{needle}` in:\n{evidence}");
        }
        assert!(!evidence.contains("case_100 ... ok"), "{evidence}");
    }

    #[test]
    fn evidence_within_any_budget() {
        let output = "error: one\n".repeat(1000);
        for budget in [0, 1, 10, 100, 1000] {
            assert!(evidence(&output, budget).len() <= budget, "{budget}");
        }
    }
}
