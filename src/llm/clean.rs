//! What a model says around its JSON: `<think>` blocks (closed or not), code
//! fences, and prose before and after. [`json_text`] finds the JSON object a
//! reply carries. Pure functions.

/// The JSON object in a model's reply, with reasoning, fences and prose
/// around it stripped; `None` when there is no `{` to start one.
pub fn json_text(reply: &str) -> Option<&str> {
    let text = without_thinking(reply);
    let text = fenced(text).unwrap_or(text);
    object(text)
}

/// The reply without its reasoning: what follows the last `</think>` (a
/// reply may open mid-thought), or what precedes an unclosed `<think>`.
pub fn without_thinking(reply: &str) -> &str {
    if let Some(end) = reply.rfind("</think>") {
        return &reply[end + "</think>".len()..];
    }
    match reply.find("<think>") {
        Some(start) => &reply[..start],
        None => reply,
    }
}

/// The body of the first code fence labelled `json`, else of the first that
/// holds a `{`.
fn fenced(text: &str) -> Option<&str> {
    fences(text, true).or_else(|| fences(text, false))
}

fn fences(text: &str, json_only: bool) -> Option<&str> {
    let mut rest = text;
    while let Some(open) = rest.find("```") {
        let after = &rest[open + 3..];
        // The info string (`json`) runs to the end of the line.
        let info = after.split('\n').next().unwrap_or("").trim();
        let body_start = after.find('\n').map_or(after.len(), |n| n + 1);
        let body = &after[body_start..];
        let close = body.find("```").unwrap_or(body.len());
        let inside = &body[..close];
        if inside.contains('{') && (!json_only || info.eq_ignore_ascii_case("json")) {
            return Some(inside);
        }
        if close == body.len() {
            return None;
        }
        rest = &body[close + 3..];
    }
    None
}

/// The first balanced `{…}` in `text` (strings and escapes respected); a
/// truncated object is returned to its end, so the parser names what is missing.
fn object(text: &str) -> Option<&str> {
    let start = text.find('{')?;
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for (i, c) in text[start..].char_indices() {
        if in_string {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(&text[start..start + i + 1]);
                }
            }
            _ => {}
        }
    }
    Some(text[start..].trim_end())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasoning_fences_and_prose_are_stripped() {
        let cases = [
            (r#"{"a": 1}"#, r#"{"a": 1}"#),
            ("<think>I should {plan}</think>\n{\"a\": 1}", r#"{"a": 1}"#),
            ("still thinking {x}</think>{\"a\": 1}", r#"{"a": 1}"#),
            ("{\"a\": 1}\n<think>more {y}", r#"{"a": 1}"#),
            (
                "Here is the plan:\n```json\n{\"a\": {\"b\": \"}\"}}\n```\nHope it helps {really}.",
                "{\"a\": {\"b\": \"}\"}}",
            ),
            ("```\n{\"a\": 1}\n```", r#"{"a": 1}"#),
            ("```text\nno json here\n```\n```json\n{\"a\": 2}\n```", r#"{"a": 2}"#),
            (
                "Run this:\n```bash\nfor f in *; do { echo; }; done\n```\n```json\n{\"a\": 3}\n```",
                r#"{"a": 3}"#,
            ),
            (
                "Sure! {\"a\": \"quote \\\" and } brace\"} trailing words",
                "{\"a\": \"quote \\\" and } brace\"}",
            ),
            ("{\"a\": [1, 2", "{\"a\": [1, 2"),
        ];
        for (reply, want) in cases {
            assert_eq!(json_text(reply), Some(want), "{reply:?}");
        }
    }

    #[test]
    fn a_reply_without_an_object_has_no_json() {
        for reply in ["", "I cannot help with that.", "<think>{\"a\": 1}", "```\nplain\n```"] {
            assert_eq!(json_text(reply), None, "{reply:?}");
        }
    }
}
