//! Cutting tools' output down to what a record, a message or a prompt keeps.

/// The first non-empty line of `text` (empty when there is none).
pub fn first_line(text: &str) -> &str {
    text.lines().find(|l| !l.trim().is_empty()).unwrap_or("")
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

/// `what`, followed by the last lines of `output` when there are any — at
/// most 5 lines and [`MESSAGE_TAIL`] bytes, since the message travels into
/// the journal, the trail and the next attempt's environment.
pub fn with_output(what: String, output: &str) -> String {
    let tail = tail(&last_lines(output, 5), MESSAGE_TAIL);
    if tail.is_empty() {
        what
    } else {
        format!("{what}: {tail}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(with_output("exit 1".into(), "\n"), "exit 1");
        assert_eq!(with_output("exit 1".into(), "boom\n"), "exit 1: boom");
        let long = "x".repeat(10 * MESSAGE_TAIL);
        assert_eq!(
            with_output("exit 1".into(), &long).len(),
            "exit 1: ".len() + MESSAGE_TAIL
        );
    }
}
