//! Time as the engine sees it: millisecond timestamps written as RFC 3339, human
//! durations written like `90s` or `5m`, and an injectable clock so that every
//! transition is deterministic under test.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A point in time with millisecond precision, written as RFC 3339 UTC
/// (`2026-11-22T03:12:55.123Z`). Millisecond storage makes a save/load round
/// trip exact.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(u64);

impl Timestamp {
    /// Returns the timestamp `millis` milliseconds after the Unix epoch.
    pub const fn from_millis(millis: u64) -> Self {
        Self(millis)
    }

    /// Returns milliseconds since the Unix epoch.
    pub const fn as_millis(self) -> u64 {
        self.0
    }

    /// Returns the current wall-clock time.
    pub fn now() -> Self {
        let millis = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        Self(millis)
    }

    /// Returns the time elapsed from `earlier` to `self`, zero if `earlier` is later.
    pub fn since(self, earlier: Timestamp) -> Duration {
        Duration::from_millis(self.0.saturating_sub(earlier.0))
    }

    /// Parses an RFC 3339 timestamp such as `2026-11-22T03:12:55Z`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let time = humantime::parse_rfc3339_weak(text.trim_end_matches('Z'))
            .map_err(|e| format!("invalid timestamp `{text}`: {e}"))?;
        let millis = time
            .duration_since(UNIX_EPOCH)
            .map_err(|_| format!("timestamp `{text}` is before 1970"))?
            .as_millis() as u64;
        Ok(Self(millis))
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let time = UNIX_EPOCH + Duration::from_millis(self.0);
        write!(f, "{}", humantime::format_rfc3339_millis(time))
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Timestamp::parse(&text).map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for Timestamp {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Timestamp".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "format": "date-time",
            "description": "RFC 3339 UTC time, e.g. 2026-11-22T03:12:55.123Z"
        })
    }
}

/// A length of time written with units: `500ms`, `90s`, `5m`, `1h30m`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Span(pub Duration);

impl Span {
    /// Parses a duration with units; a bare number is refused because `30`
    /// could mean seconds or minutes.
    pub fn parse(text: &str) -> Result<Self, String> {
        let trimmed = text.trim();
        if trimmed.is_empty() {
            return Err("empty duration: write a number with a unit, like 90s or 5m".into());
        }
        if trimmed.chars().all(|c| c.is_ascii_digit() || c == '.') {
            return Err(format!(
                "duration `{trimmed}` has no unit: write `{trimmed}s` for seconds or `{trimmed}m` for minutes"
            ));
        }
        if trimmed.starts_with('-') {
            return Err(format!("duration `{trimmed}` is negative"));
        }
        humantime::parse_duration(trimmed).map(Span).map_err(|e| {
            let detail = match e {
                humantime::DurationError::UnknownUnit { unit, .. } => format!(": unknown unit `{unit}`"),
                humantime::DurationError::NumberOverflow => ": too long".to_string(),
                _ => String::new(),
            };
            format!("invalid duration `{trimmed}`{detail}; write a number with a unit, like 500ms, 90s, 5m or 1h30m")
        })
    }
}

impl fmt::Display for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = humantime::format_duration(self.0).to_string();
        // humantime separates units with spaces ("1h 30m"); the file reads better without.
        write!(f, "{}", text.replace(' ', ""))
    }
}

impl Serialize for Span {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Span {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Span;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration with a unit, like 90s or 5m")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Span, E> {
                Span::parse(v).map_err(E::custom)
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Span, E> {
                Span::parse(&v.to_string()).map_err(E::custom)
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Span, E> {
                Span::parse(&v.to_string()).map_err(E::custom)
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Span, E> {
                Span::parse(&v.to_string()).map_err(E::custom)
            }
        }
        d.deserialize_any(Visitor)
    }
}

impl JsonSchema for Span {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Duration".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "format": "duration",
            "pattern": "^\\s*([0-9]+(\\.[0-9]+)?\\s*[a-zA-Z]+\\s*)+$",
            "description": "a length of time with units: 500ms, 90s, 5m, 1h30m",
            "examples": ["90s", "5m", "1h30m"]
        })
    }
}

/// The source of "now" for every transition. Tests pass a [`FixedClock`].
pub trait Clock: Send + Sync {
    /// Returns the current time.
    fn now(&self) -> Timestamp;
}

/// The wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

/// A clock that starts at a fixed instant and advances by a fixed step on every
/// reading, so that successive events get distinct, predictable times.
#[derive(Debug)]
pub struct FixedClock {
    next: AtomicU64,
    step: u64,
}

impl FixedClock {
    /// Returns a clock whose first reading is `start` and that advances `step_ms` per reading.
    pub fn new(start: Timestamp, step_ms: u64) -> Self {
        Self {
            next: AtomicU64::new(start.as_millis()),
            step: step_ms,
        }
    }
}

impl Clock for FixedClock {
    fn now(&self) -> Timestamp {
        Timestamp(self.next.fetch_add(self.step, Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamp_round_trips_with_millis() {
        let t = Timestamp::from_millis(1_795_000_000_123);
        let text = t.to_string();
        assert_eq!(text, "2026-11-18T11:06:40.123Z");
        assert_eq!(Timestamp::parse(&text).unwrap(), t);
    }

    #[test]
    fn spans_parse_and_print_compactly() {
        for (text, secs) in [("90s", 90), ("5m", 300), ("1h30m", 5400), ("1h 30m", 5400)] {
            let span = Span::parse(text).unwrap();
            assert_eq!(span.0.as_secs(), secs, "{text}");
        }
        assert_eq!(Span(Duration::from_secs(5400)).to_string(), "1h30m");
        assert_eq!(Span(Duration::from_millis(500)).to_string(), "500ms");
    }

    #[test]
    fn spans_without_units_or_negative_are_refused() {
        assert!(Span::parse("30").unwrap_err().contains("no unit"));
        assert!(Span::parse("-5m").unwrap_err().contains("negative"));
        assert!(Span::parse("soon").unwrap_err().contains("invalid duration"));
        assert!(Span::parse("").unwrap_err().contains("empty"));
    }

    #[test]
    fn fixed_clock_advances_by_step() {
        let clock = FixedClock::new(Timestamp::from_millis(1000), 10);
        assert_eq!(clock.now().as_millis(), 1000);
        assert_eq!(clock.now().as_millis(), 1010);
    }
}
