//! Durations as blueprints write them: `500ms`, `10s`, `2m`, `1h`, no longer than
//! [`MAX_DURATION`].

use std::time::Duration;

/// The longest duration a blueprint may set (a timeout, a wait, a grace period): 30 days. The
/// engine adds durations to instants; a bound far inside what an instant holds keeps every such
/// sum exact, and no deployment means to wait longer.
pub const MAX_DURATION: Duration = Duration::from_secs(30 * 24 * 3600);

/// [`MAX_DURATION`] in milliseconds, as events record durations.
pub const MAX_DURATION_MS: u64 = 30 * 24 * 3600 * 1000;

/// Why a blueprint's duration is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// Not written as a duration.
    #[error("`{0}` is not a duration; write it like 500ms, 10s, 2m or 1h")]
    NotADuration(String),
    /// Longer than [`MAX_DURATION`].
    #[error("`{0}` is longer than the 720h (30 days) a blueprint may set; give at most 720h")]
    TooLong(String),
}

/// Reads a blueprint's duration: [`parse_duration`], at most [`MAX_DURATION`].
pub fn read_duration(text: &str) -> Result<Duration, DurationError> {
    match parse_duration(text) {
        None if is_too_large(text) => Err(DurationError::TooLong(text.to_owned())),
        None => Err(DurationError::NotADuration(text.to_owned())),
        Some(duration) if duration > MAX_DURATION => Err(DurationError::TooLong(text.to_owned())),
        Some(duration) => Ok(duration),
    }
}

/// Whether `text` is a duration whose number is too large to read at all.
fn is_too_large(text: &str) -> bool {
    let text = text.trim();
    let digits = text.chars().take_while(char::is_ascii_digit).count();
    digits > 0 && matches!(&text[digits..], "ms" | "s" | "m" | "h")
}

/// What is wrong with a duration recorded in milliseconds, if it is longer than
/// [`MAX_DURATION`] (a blueprint recorded before the bound, or given whole as JSON).
pub fn recorded_problem(ms: u64) -> Option<String> {
    (ms > MAX_DURATION_MS).then(|| {
        format!("{ms}ms is longer than the 720h (30 days) a blueprint may set; give at most 720h")
    })
}

/// Reads `500ms`, `10s`, `2m` or `1h`; `None` for anything else.
pub fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit())?;
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().ok()?;
    let millis = match unit {
        "ms" => number,
        "s" => number.checked_mul(1_000)?,
        "m" => number.checked_mul(60_000)?,
        "h" => number.checked_mul(3_600_000)?,
        _ => return None,
    };
    Some(Duration::from_millis(millis))
}

/// Writes a duration back in the shortest blueprint form that is exact.
pub fn format_duration(duration: Duration) -> String {
    let millis = duration.as_millis();
    match millis {
        0 => "0s".to_owned(),
        m if m % 3_600_000 == 0 => format!("{}h", m / 3_600_000),
        m if m % 60_000 == 0 => format!("{}m", m / 60_000),
        m if m % 1_000 == 0 => format!("{}s", m / 1_000),
        m => format!("{m}ms"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_every_unit() {
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("10s"), Some(Duration::from_secs(10)));
        assert_eq!(parse_duration("2m"), Some(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Some(Duration::from_secs(3600)));
    }

    #[test]
    fn refuses_what_is_not_a_duration() {
        for bad in [
            "",
            "10",
            "s",
            "1.5s",
            "-1s",
            "10 sec",
            "5d",
            "99999999999999999999h",
        ] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_duration_is_at_most_thirty_days() {
        assert_eq!(read_duration("720h"), Ok(MAX_DURATION));
        assert_eq!(MAX_DURATION.as_millis(), u128::from(MAX_DURATION_MS));
        for long in [
            "721h",
            "43201m",
            "2592000001ms",
            "9223372036854775808ms",
            "99999999999999999999h",
        ] {
            assert_eq!(
                read_duration(long),
                Err(DurationError::TooLong(long.into())),
                "{long}"
            );
        }
        assert_eq!(
            read_duration("soon"),
            Err(DurationError::NotADuration("soon".into()))
        );
        assert_eq!(recorded_problem(MAX_DURATION_MS), None);
        assert!(recorded_problem(u64::MAX).is_some());
    }

    #[test]
    fn formats_in_the_largest_exact_unit() {
        assert_eq!(format_duration(Duration::from_secs(120)), "2m");
        assert_eq!(format_duration(Duration::from_millis(1500)), "1500ms");
        assert_eq!(format_duration(Duration::from_secs(10)), "10s");
    }
}
