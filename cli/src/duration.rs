//! Durations on the command line, as people write them: `500ms`, `1.5s`, `2min`, `1m30s`,
//! `1h`, `2 days`.

use std::time::Duration;

/// The units accepted, with their length in seconds.
const UNITS: &[(&[&str], f64)] = &[
    (&["ns", "nsec"], 1e-9),
    (&["us", "µs", "usec"], 1e-6),
    (&["ms", "msec", "msecs", "millis"], 1e-3),
    (&["s", "sec", "secs", "second", "seconds"], 1.0),
    (&["m", "min", "mins", "minute", "minutes"], 60.0),
    (&["h", "hr", "hrs", "hour", "hours"], 3600.0),
    (&["d", "day", "days"], 86_400.0),
];

/// Parses a duration: one or more `<number><unit>` terms, summed (`1m30s`); a number may
/// have a fraction (`1.5s`); spaces between terms are allowed.
///
/// # Errors
///
/// A message that says what was wrong and how to write it: a bare number (no unit), an
/// unknown unit, or a value past 100 years.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let hint = "write it like 500ms, 1.5s, 2min or 1m30s";
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(format!("an empty duration; {hint}"));
    }
    let mut seconds = 0.0;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, after) = rest.split_at(digits);
        let value: f64 = number
            .parse()
            .map_err(|_| format!("{text:?} is not a duration; {hint}"))?;
        let after = after.trim_start();
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.' || c.is_whitespace())
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_len);
        if unit.is_empty() {
            return Err(format!("{text:?} has a number without a unit; {hint}"));
        }
        let scale = UNITS
            .iter()
            .find(|(names, _)| names.contains(&unit))
            .map(|(_, scale)| *scale)
            .ok_or_else(|| format!("unknown unit {unit:?} in {text:?}; use ms, s, min, h or d"))?;
        seconds += value * scale;
        rest = next.trim_start();
    }
    if !seconds.is_finite() || seconds > 100.0 * 365.0 * 86_400.0 {
        return Err(format!("{text:?} is out of range"));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// A session timeout: a duration between 1 s and 10 min. ZooKeeper clamps what it grants to
/// its `minSessionTimeout`..`maxSessionTimeout` (2 to 20 ticks: 4 s to 40 s with the stock
/// tickTime of 2 s), so larger values would be cut silently, and a lease shorter than a second
/// cannot be renewed in time.
///
/// # Errors
///
/// As [`parse_duration`], and a value out of those bounds.
pub(crate) fn parse_session_timeout(text: &str) -> Result<Duration, String> {
    let timeout = parse_duration(text)?;
    if timeout < Duration::from_secs(1) || timeout > Duration::from_secs(600) {
        return Err(format!(
            "a session timeout of {timeout:?} is out of bounds: use 1s to 10min (ZooKeeper grants 2 to 20 ticks: 4s to 40s at its default tickTime)"
        ));
    }
    Ok(timeout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_as_people_write_them() {
        let ok = |text, ms| {
            assert_eq!(
                parse_duration(text),
                Ok(Duration::from_millis(ms)),
                "{text}"
            )
        };
        ok("500ms", 500);
        ok("2s", 2_000);
        ok("1.5s", 1_500);
        ok("2min", 120_000);
        ok("3m", 180_000);
        ok("1m30s", 90_000);
        ok("1h 2m", 3_720_000);
        ok("2 days", 172_800_000);
        ok("0s", 0);
    }

    #[test]
    fn bad_durations_say_how_to_write_them() {
        assert!(parse_duration("2").unwrap_err().contains("without a unit"));
        assert!(parse_duration("2fortnights")
            .unwrap_err()
            .contains("unknown unit"));
        assert!(parse_duration("fast")
            .unwrap_err()
            .contains("not a duration"));
        assert!(parse_duration("").unwrap_err().contains("empty"));
        assert!(parse_duration("1e400s").is_err());
    }

    #[test]
    fn session_timeouts_have_bounds() {
        assert_eq!(parse_session_timeout("10s"), Ok(Duration::from_secs(10)));
        for bad in ["1ms", "0s", "10h"] {
            assert!(
                parse_session_timeout(bad)
                    .unwrap_err()
                    .contains("out of bounds"),
                "{bad}"
            );
        }
    }
}
