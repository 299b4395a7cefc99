//! `--since`: the lower bound of `parley audit`, parsed once from what a person types: a
//! duration back from now (`90s`, `30m`, `2h`, `7d`), an RFC 3339 time or a date. It names
//! the forms it accepts when it refuses one; it does not know the database's clock.

use std::time::Duration;

use chrono::{DateTime, NaiveDate, Utc};

/// The forms accepted, in every refusal, so a typo is fixed without reading the docs.
const FORMS: &str = "expected a duration back from now (90s, 30m, 2h, 7d), \
    an RFC 3339 time (2026-11-24T10:00:00Z) or a date (2026-11-24, from midnight UTC)";

/// Far enough back for any audit trail, near enough that `now() - it` stays a timestamp
/// Postgres can hold (its range ends at 4713 BC).
const MAX_AGO_DAYS: u64 = 36_500;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Since {
    /// This long before the database's `now()`: measured by its clock, not this machine's.
    Ago(Duration),
    /// From this instant on.
    At(DateTime<Utc>),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SinceError {
    #[error("{FORMS}")]
    Unrecognised,
    #[error("at most {MAX_AGO_DAYS}d back")]
    TooFarBack,
}

impl Since {
    /// For clap's `value_parser`.
    pub fn parse(raw: &str) -> Result<Since, SinceError> {
        let raw = raw.trim();
        if let Some(ago) = parse_ago(raw)? {
            return Ok(Since::Ago(ago));
        }
        if let Ok(at) = DateTime::parse_from_rfc3339(raw) {
            return Ok(Since::At(at.with_timezone(&Utc)));
        }
        if let Ok(day) = NaiveDate::parse_from_str(raw, "%Y-%m-%d") {
            return Ok(Since::At(day.and_time(chrono::NaiveTime::MIN).and_utc()));
        }
        Err(SinceError::Unrecognised)
    }
}

/// `<digits><s|m|h|d>`, or `None` when `raw` is not of that shape (it may be a time).
fn parse_ago(raw: &str) -> Result<Option<Duration>, SinceError> {
    let Some(unit) = raw.chars().last() else {
        return Ok(None);
    };
    let digits = &raw[..raw.len() - unit.len_utf8()];
    let per_unit: u64 = match unit {
        's' => 1,
        'm' => 60,
        'h' => 3_600,
        'd' => 86_400,
        _ => return Ok(None),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Ok(None);
    }
    let secs = digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(per_unit))
        .filter(|&s| s <= MAX_AGO_DAYS * 86_400)
        .ok_or(SinceError::TooFarBack)?;
    Ok(Some(Duration::from_secs(secs)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ago(secs: u64) -> Result<Since, SinceError> {
        Ok(Since::Ago(Duration::from_secs(secs)))
    }

    fn at(rfc3339: &str) -> Result<Since, SinceError> {
        Ok(Since::At(
            DateTime::parse_from_rfc3339(rfc3339).unwrap().to_utc(),
        ))
    }

    #[test]
    fn durations_count_back_in_seconds_minutes_hours_and_days() {
        assert_eq!(Since::parse("90s"), ago(90));
        assert_eq!(Since::parse("30m"), ago(1_800));
        assert_eq!(Since::parse("2h"), ago(7_200));
        assert_eq!(Since::parse("7d"), ago(604_800));
        assert_eq!(Since::parse("0s"), ago(0));
        assert_eq!(Since::parse(" 15m "), ago(900));
    }

    #[test]
    fn times_are_rfc3339_in_any_offset_and_kept_as_utc() {
        assert_eq!(
            Since::parse("2026-11-24T10:00:00Z"),
            at("2026-11-24T10:00:00Z")
        );
        assert_eq!(
            Since::parse("2026-11-24T11:30:00.250+01:00"),
            at("2026-11-24T10:30:00.250Z")
        );
    }

    #[test]
    fn a_date_means_from_its_midnight_utc() {
        assert_eq!(Since::parse("2026-11-24"), at("2026-11-24T00:00:00Z"));
    }

    #[test]
    fn anything_else_is_refused_naming_the_accepted_forms() {
        for bad in [
            "",
            "h",
            "2",
            "2w",
            "-2h",
            "+2h",
            "2.5h",
            "2 h",
            "1h30m",
            "yesterday",
            "2026-13-01",
            "2026-11-24T10:00",
            "10:00",
            "２h",
        ] {
            let err = Since::parse(bad).expect_err(bad);
            assert_eq!(err, SinceError::Unrecognised, "{bad:?}");
            let message = err.to_string();
            for form in ["90s", "30m", "2h", "7d", "RFC 3339", "2026-11-24"] {
                assert!(message.contains(form), "{bad:?}: {message}");
            }
        }
    }

    #[test]
    fn durations_past_a_century_are_refused_rather_than_overflowing() {
        assert_eq!(Since::parse("36500d"), ago(36_500 * 86_400));
        assert_eq!(Since::parse("36501d"), Err(SinceError::TooFarBack));
        assert_eq!(
            Since::parse("99999999999999999999s"),
            Err(SinceError::TooFarBack)
        );
        assert_eq!(
            Since::parse("999999999999999999d"),
            Err(SinceError::TooFarBack)
        );
    }
}
