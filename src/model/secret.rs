//! Secrets: environment variables whose names say they hold one, and the
//! redaction of their values from anything aot records (bindings, failure
//! messages, the journal, the memory). Pure functions.

/// The shortest value redacted: shorter ones (`1`, `true`) would cut
/// ordinary words out of every output.
pub const SHORTEST: usize = 6;

/// What a redacted value is replaced with.
pub const REDACTED: &str = "[redacted]";

/// Whether an environment variable's name says it holds a secret:
/// `API_KEY`, `GITHUB_TOKEN`, `DB_PASSWORD`, `AWS_SECRET_ACCESS_KEY`, …
pub fn is_secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    let words: Vec<&str> = upper.split(|c: char| !c.is_ascii_alphanumeric()).collect();
    words.iter().any(|w| {
        matches!(
            *w,
            "TOKEN" | "SECRET" | "PASSWORD" | "PASSWD" | "PASS" | "CREDENTIAL" | "CREDENTIALS" | "APIKEY" | "PAT"
        )
    }) || words.last().is_some_and(|w| *w == "KEY")
}

/// The values among `vars` that are secrets by name, long enough to redact,
/// longest first (so a secret containing another is replaced whole).
pub fn secret_values<'a>(vars: impl IntoIterator<Item = (&'a str, &'a str)>) -> Vec<String> {
    let mut values: Vec<String> = vars
        .into_iter()
        .filter(|(name, value)| is_secret_name(name) && value.len() >= SHORTEST)
        .map(|(_, value)| value.to_string())
        .collect();
    values.sort_by_key(|v| std::cmp::Reverse(v.len()));
    values.dedup();
    values
}

/// `text` with every occurrence of each of `secrets` replaced by [`REDACTED`].
pub fn redact(text: &str, secrets: &[String]) -> String {
    let mut out = text.to_string();
    for secret in secrets {
        if out.contains(secret.as_str()) {
            out = out.replace(secret.as_str(), REDACTED);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_say_secret() {
        for name in [
            "API_KEY",
            "OPENAI_API_KEY",
            "github_token",
            "DB_PASSWORD",
            "AWS_SECRET_ACCESS_KEY",
            "NPM_PAT",
        ] {
            assert!(is_secret_name(name), "{name}");
        }
        for name in [
            "PATH",
            "HOME",
            "KEYBOARD",
            "MONKEY",
            "PASSAGE",
            "SSH_AUTH_SOCK",
            "KEY_FILE_DIR",
        ] {
            assert!(!is_secret_name(name), "{name}");
        }
    }

    #[test]
    fn values_are_redacted_whole_and_short_ones_left() {
        let secrets = secret_values([
            ("API_KEY", "sk-abc123"),
            ("TOKEN", "sk-abc123-long"),
            ("PASS", "no"),
            ("HOME", "/root"),
        ]);
        assert_eq!(secrets, ["sk-abc123-long", "sk-abc123"]);
        assert_eq!(
            redact("key sk-abc123-long and sk-abc123, no", &secrets),
            "key [redacted] and [redacted], no"
        );
    }
}
