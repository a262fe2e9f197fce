//! Timestamps as JP writes them.
//!
//! A [`Timestamp`] is a UTC instant with nanosecond precision in the years
//! 0000 to 9999. Its text form is JP's `YYYY-MM-DD HH:MM:SS.f` (UTC, trailing
//! zeros of the fraction trimmed, `.0` when the fraction is zero); RFC 3339 is
//! also accepted on input and converted to UTC. In MessagePack log entries a
//! timestamp is stored compactly as the pair `[secs, nanos]` (see the serde
//! implementations).

use std::fmt;
use std::str::FromStr;

use chrono::{NaiveDate, Utc};
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Seconds since the Unix epoch of `0000-01-01 00:00:00` UTC, the earliest
/// representable second.
const MIN_SECS: i64 = -62_167_219_200;
/// Seconds since the Unix epoch of `9999-12-31 23:59:59` UTC, the latest
/// representable second.
const MAX_SECS: i64 = 253_402_300_799;
/// One second in nanoseconds; `nanos` is always below this.
const NANOS_PER_SEC: u32 = 1_000_000_000;
/// At most this many fraction digits are accepted (nanosecond precision).
const MAX_FRACTION_DIGITS: usize = 9;

/// The text forms [`Timestamp::parse`] accepts, quoted in its errors.
const ACCEPTED_FORMS: &str = "accepted forms are `YYYY-MM-DD HH:MM:SS` with an optional \
     `.` and 1 to 9 fraction digits (UTC), or RFC 3339 such as \
     `YYYY-MM-DDTHH:MM:SS.fffZ` or `YYYY-MM-DDTHH:MM:SS+HH:MM`, in the years 0000 to 9999";

/// A UTC instant with nanosecond precision, as JP writes it.
///
/// Ordering is chronological. Every value lies in the years 0000 to 9999 and
/// has `subsec_nanos() < 1_000_000_000`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp {
    /// Seconds since the Unix epoch (1970-01-01 00:00:00 UTC).
    secs: i64,
    /// Nanoseconds past `secs`, below one second.
    nanos: u32,
}

/// Why a text is not a timestamp.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TimestampError {
    /// The text does not have the shape of an accepted form.
    #[error("invalid timestamp {text:?}: expected {expected} at byte {offset}, found {found}; {ACCEPTED_FORMS}")]
    Syntax {
        /// The whole text that was parsed.
        text: String,
        /// Byte offset of the first character that does not fit.
        offset: usize,
        /// What an accepted form has there.
        expected: &'static str,
        /// What the text has there (a quoted character, or "the end of the text").
        found: String,
    },
    /// The text has the right shape but a field names no real instant
    /// (month 13, February 30, hour 24, an instant outside the years 0000 to
    /// 9999 after conversion to UTC, ...).
    #[error(
        "invalid timestamp {text:?}: expected {field} {expected}, found {found}; {ACCEPTED_FORMS}"
    )]
    OutOfRange {
        /// The whole text that was parsed.
        text: String,
        /// The field that is out of range ("month", "day", "hour", ...).
        field: &'static str,
        /// The range the field must lie in.
        expected: String,
        /// The value the text gives.
        found: String,
    },
}

impl Timestamp {
    /// The current time of the system clock.
    ///
    /// A clock set outside the years 0000 to 9999 gives the nearest
    /// representable instant.
    pub fn now() -> Timestamp {
        let now = Utc::now();
        let nanos = now.timestamp_subsec_nanos().min(NANOS_PER_SEC - 1);
        match now.timestamp() {
            secs if secs < MIN_SECS => Timestamp {
                secs: MIN_SECS,
                nanos: 0,
            },
            secs if secs > MAX_SECS => Timestamp {
                secs: MAX_SECS,
                nanos: NANOS_PER_SEC - 1,
            },
            secs => Timestamp { secs, nanos },
        }
    }

    /// The Unix epoch, 1970-01-01 00:00:00 UTC.
    pub(crate) const EPOCH: Timestamp = Timestamp { secs: 0, nanos: 0 };

    /// The instant `secs` seconds and `nanos` nanoseconds after the Unix
    /// epoch; `None` if `nanos >= 1_000_000_000` or the instant lies outside
    /// the years 0000 to 9999.
    pub fn from_unix(secs: i64, nanos: u32) -> Option<Timestamp> {
        if nanos >= NANOS_PER_SEC || !(MIN_SECS..=MAX_SECS).contains(&secs) {
            return None;
        }
        Some(Timestamp { secs, nanos })
    }

    /// Whole seconds since the Unix epoch (negative before 1970).
    pub fn unix_secs(&self) -> i64 {
        self.secs
    }

    /// Nanoseconds past [`unix_secs`](Self::unix_secs), below one second.
    pub fn subsec_nanos(&self) -> u32 {
        self.nanos
    }

    /// Parses JP's form `YYYY-MM-DD HH:MM:SS[.f]` (UTC, 1 to 9 fraction
    /// digits) or RFC 3339 (`T` or `t` between date and time, `Z`, `z` or a
    /// `+HH:MM`/`-HH:MM` offset, converted to UTC).
    ///
    /// Nothing else is accepted: no surrounding whitespace, no leap second
    /// (`:60`), no more than 9 fraction digits.
    pub fn parse(text: &str) -> Result<Timestamp, TimestampError> {
        Parser { text, pos: 0 }.timestamp()
    }

    /// The JP form (the `Display` form) into a buffer (rendering thousands of
    /// events allocates nothing for their timestamps): the bytes and how
    /// many are used.
    fn jp_bytes(&self) -> ([u8; 29], usize) {
        let (year, month, day) = civil_from_days(self.secs.div_euclid(86_400));
        let second_of_day = self.secs.rem_euclid(86_400) as u32;
        let mut buf = *b"0000-00-00 00:00:00.000000000";
        // Two digits at a time.
        const PAIRS: &[u8; 200] = b"00010203040506070809101112131415161718192021222324252627282930313233343536373839404142434445464748495051525354555657585960616263646566676869707172737475767778798081828384858687888990919293949596979899";
        let mut pair = |at: usize, value: u32| {
            let v = (value % 100) as usize * 2;
            buf[at] = PAIRS[v];
            buf[at + 1] = PAIRS[v + 1];
        };
        // `from_unix` guarantees the range (years 0000 to 9999).
        let year = year.clamp(0, 9999) as u32;
        pair(0, year / 100);
        pair(2, year);
        pair(5, month);
        pair(8, day);
        pair(11, second_of_day / 3600);
        pair(14, second_of_day / 60 % 60);
        pair(17, second_of_day % 60);
        let nanos = self.nanos.min(999_999_999);
        if nanos == 0 {
            return (buf, 21);
        }
        pair(20, nanos / 10_000_000);
        pair(22, nanos / 100_000);
        pair(24, nanos / 1_000);
        pair(26, nanos / 10);
        buf[28] = b'0' + (nanos % 10) as u8;
        let mut len = buf.len();
        while len > 21 && buf[len - 1] == b'0' {
            len -= 1;
        }
        (buf, len)
    }
}

/// The proleptic Gregorian date (year, month, day) of `days` days after
/// 1970-01-01 (Howard Hinnant's `civil_from_days`: integer arithmetic only,
/// a few nanoseconds, where rendering thousands of timestamps through a
/// calendar library costs a millisecond).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

impl Timestamp {
    /// Appends the JP form (the `Display` form) to `out`.
    pub(crate) fn write_jp(&self, out: &mut Vec<u8>) {
        let (buf, len) = self.jp_bytes();
        out.extend_from_slice(&buf[..len]);
    }

    /// Hands the JP form (the `Display` form) to `f`, built on the
    /// stack (for serializers: no formatting machinery, no allocation).
    pub(crate) fn with_jp_str<T>(&self, f: impl FnOnce(&str) -> T) -> T {
        let (buf, len) = self.jp_bytes();
        // Digits, `-`, ` `, `:` and `.` only: always UTF-8.
        f(std::str::from_utf8(&buf[..len]).unwrap_or_default())
    }
}

impl fmt::Display for Timestamp {
    /// Writes the JP form `YYYY-MM-DD HH:MM:SS.f` in UTC, with trailing zeros
    /// of the fraction trimmed and `.0` when the fraction is zero.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.with_jp_str(|text| f.write_str(text))
    }
}

impl FromStr for Timestamp {
    type Err = TimestampError;

    /// Same as [`Timestamp::parse`].
    fn from_str(text: &str) -> Result<Timestamp, TimestampError> {
        Timestamp::parse(text)
    }
}

impl Serialize for Timestamp {
    /// Serializes as the two-element sequence `[secs, nanos]`.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        (self.secs, self.nanos).serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    /// Deserializes the sequence `[secs, nanos]`, rejecting
    /// `nanos >= 1_000_000_000` and instants outside the years 0000 to 9999.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Timestamp, D::Error> {
        let (secs, nanos) = <(i64, u32)>::deserialize(deserializer)?;
        if nanos >= NANOS_PER_SEC {
            return Err(D::Error::custom(format_args!(
                "invalid timestamp: expected nanoseconds below {NANOS_PER_SEC}, found {nanos}"
            )));
        }
        Timestamp::from_unix(secs, nanos).ok_or_else(|| {
            D::Error::custom(format_args!(
                "invalid timestamp: expected seconds in {MIN_SECS}..={MAX_SECS} \
                 (years 0000 to 9999), found {secs}"
            ))
        })
    }
}

/// A strict left-to-right parser over the ASCII fields of a timestamp.
struct Parser<'a> {
    /// The whole text.
    text: &'a str,
    /// Byte offset of the next unread character. Only ASCII is ever
    /// consumed, so this is always a character boundary.
    pos: usize,
}

impl Parser<'_> {
    /// Parses the whole text as a timestamp.
    fn timestamp(mut self) -> Result<Timestamp, TimestampError> {
        let year = self.digits(4, "a 4-digit year")?;
        self.literal(b'-', "'-' after the year")?;
        let month = self.digits(2, "a 2-digit month")?;
        self.literal(b'-', "'-' after the month")?;
        let day = self.digits(2, "a 2-digit day")?;
        let rfc3339 = match self.peek() {
            Some(b' ') => false,
            Some(b'T' | b't') => true,
            _ => return Err(self.syntax("' ', 'T' or 't' between date and time")),
        };
        self.pos += 1;
        let hour = self.digits(2, "a 2-digit hour")?;
        self.literal(b':', "':' after the hour")?;
        let minute = self.digits(2, "2-digit minutes")?;
        self.literal(b':', "':' after the minutes")?;
        let second = self.digits(2, "2-digit seconds")?;
        let nanos = self.fraction()?;
        let offset_secs = if rfc3339 { self.offset()? } else { 0 };
        if self.pos != self.text.len() {
            return Err(self.syntax(if rfc3339 {
                "the end of the text after the offset"
            } else {
                "'.' and fraction digits, or the end of the text"
            }));
        }

        let month = self.range("month", "in 01..=12", month, 1..=12)?;
        let date = NaiveDate::from_ymd_opt(year as i32, month, day).ok_or_else(|| {
            self.out_of_range(
                "day",
                format!("to be a day of {year:04}-{month:02}"),
                format!("{day:02}"),
            )
        })?;
        let hour = self.range("hour", "in 00..=23", hour, 0..=23)?;
        let minute = self.range("minutes", "in 00..=59", minute, 0..=59)?;
        let second = self.range("seconds", "in 00..=59", second, 0..=59)?;
        let local = date
            .and_hms_opt(hour, minute, second)
            .map(|time| time.and_utc().timestamp())
            .ok_or_else(|| self.out_of_range("time", "a valid time".into(), self.text.into()))?;
        let secs = local - offset_secs;
        Timestamp::from_unix(secs, nanos).ok_or_else(|| {
            self.out_of_range(
                "instant",
                "in the years 0000 to 9999 after conversion to UTC".into(),
                format!("{secs} seconds since the Unix epoch"),
            )
        })
    }

    /// An optional `.` followed by 1 to 9 digits, as nanoseconds.
    fn fraction(&mut self) -> Result<u32, TimestampError> {
        if self.peek() != Some(b'.') {
            return Ok(0);
        }
        self.pos += 1;
        let start = self.pos;
        let mut nanos = 0u32;
        while let Some(digit @ b'0'..=b'9') = self.peek() {
            if self.pos - start == MAX_FRACTION_DIGITS {
                return Err(self.syntax("no more than 9 fraction digits"));
            }
            nanos = nanos * 10 + u32::from(digit - b'0');
            self.pos += 1;
        }
        let count = self.pos - start;
        if count == 0 {
            return Err(self.syntax("a fraction digit after '.'"));
        }
        Ok(nanos * 10u32.pow((MAX_FRACTION_DIGITS - count) as u32))
    }

    /// An RFC 3339 offset (`Z`, `z`, `+HH:MM` or `-HH:MM`), as seconds east
    /// of UTC.
    fn offset(&mut self) -> Result<i64, TimestampError> {
        let sign = match self.peek() {
            Some(b'Z' | b'z') => {
                self.pos += 1;
                return Ok(0);
            }
            Some(b'+') => 1,
            Some(b'-') => -1,
            _ => {
                return Err(self
                    .syntax("'.' and fraction digits, or an offset ('Z', '+HH:MM' or '-HH:MM')"))
            }
        };
        self.pos += 1;
        let hours = self.digits(2, "2-digit offset hours")?;
        self.literal(b':', "':' in the offset")?;
        let minutes = self.digits(2, "2-digit offset minutes")?;
        let hours = self.range("offset hours", "in 00..=23", hours, 0..=23)?;
        let minutes = self.range("offset minutes", "in 00..=59", minutes, 0..=59)?;
        Ok(sign * i64::from(hours * 3600 + minutes * 60))
    }

    /// Exactly `count` ASCII digits, as a number.
    fn digits(&mut self, count: usize, expected: &'static str) -> Result<u32, TimestampError> {
        let mut value = 0u32;
        for _ in 0..count {
            match self.peek() {
                Some(digit @ b'0'..=b'9') => {
                    value = value * 10 + u32::from(digit - b'0');
                    self.pos += 1;
                }
                _ => return Err(self.syntax(expected)),
            }
        }
        Ok(value)
    }

    /// Exactly the byte `byte`.
    fn literal(&mut self, byte: u8, expected: &'static str) -> Result<(), TimestampError> {
        if self.peek() != Some(byte) {
            return Err(self.syntax(expected));
        }
        self.pos += 1;
        Ok(())
    }

    /// The next unread byte.
    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.pos).copied()
    }

    /// `value` if it lies in `range`, else an [`TimestampError::OutOfRange`].
    fn range(
        &self,
        field: &'static str,
        expected: &str,
        value: u32,
        range: std::ops::RangeInclusive<u32>,
    ) -> Result<u32, TimestampError> {
        if range.contains(&value) {
            Ok(value)
        } else {
            Err(self.out_of_range(field, expected.into(), format!("{value:02}")))
        }
    }

    /// A syntax error at the current position.
    fn syntax(&self, expected: &'static str) -> TimestampError {
        let found = match self.text[self.pos..].chars().next() {
            Some(c) => format!("{c:?}"),
            None => "the end of the text".into(),
        };
        TimestampError::Syntax {
            text: self.text.into(),
            offset: self.pos,
            expected,
            found,
        }
    }

    /// A field that is out of range.
    fn out_of_range(&self, field: &'static str, expected: String, found: String) -> TimestampError {
        TimestampError::OutOfRange {
            text: self.text.into(),
            field,
            expected,
            found,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{DateTime, Datelike};

    #[test]
    fn the_civil_date_is_the_calendar_libraries_date() {
        let mut secs = MIN_SECS;
        while secs <= MAX_SECS {
            let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
            let date = DateTime::from_timestamp(secs, 0).expect("in range");
            assert_eq!(
                (y, m, d),
                (i64::from(date.year()), date.month(), date.day()),
                "{secs}"
            );
            secs += 86_400 * 13 + 7_919;
        }
    }
    use proptest::prelude::*;

    fn ts(text: &str) -> Timestamp {
        Timestamp::parse(text).expect("valid timestamp")
    }

    #[test]
    fn parses_jp_form_with_and_without_fraction() {
        let t = ts("2026-05-29 19:42:36.46732");
        assert_eq!(t.unix_secs(), 1_780_083_756);
        assert_eq!(t.subsec_nanos(), 467_320_000);
        assert_eq!(
            ts("2026-05-29 19:42:36.0"),
            Timestamp::from_unix(1_780_083_756, 0).expect("in range")
        );
        assert_eq!(
            ts("2026-05-29 19:42:36"),
            Timestamp::from_unix(1_780_083_756, 0).expect("in range")
        );
        assert_eq!(
            ts("1970-01-01 00:00:00.000000001"),
            Timestamp::from_unix(0, 1).expect("in range")
        );
        assert_eq!(
            ts("1969-12-31 23:59:59.5"),
            Timestamp::from_unix(-1, 500_000_000).expect("in range")
        );
    }

    #[test]
    fn writes_jp_form_with_trimmed_fraction() {
        let at = |nanos| {
            Timestamp::from_unix(1_780_083_756, nanos)
                .expect("in range")
                .to_string()
        };
        assert_eq!(at(467_320_000), "2026-05-29 19:42:36.46732");
        assert_eq!(at(0), "2026-05-29 19:42:36.0");
        assert_eq!(at(1), "2026-05-29 19:42:36.000000001");
        assert_eq!(at(999_999_999), "2026-05-29 19:42:36.999999999");
        assert_eq!(
            Timestamp::from_unix(0, 0).expect("in range").to_string(),
            "1970-01-01 00:00:00.0"
        );
    }

    #[test]
    fn canonical_jp_strings_round_trip_exactly() {
        for text in [
            "2026-05-29 19:42:36.46732",
            "2026-05-29 19:42:36.0",
            "2026-05-29 19:42:36.000000001",
            "0000-01-01 00:00:00.0",
            "9999-12-31 23:59:59.999999999",
            "2024-02-29 12:00:00.1",
            "1900-03-01 01:02:03.04",
        ] {
            assert_eq!(ts(text).to_string(), text);
            assert_eq!(
                text.parse::<Timestamp>()
                    .expect("valid timestamp")
                    .to_string(),
                text
            );
        }
    }

    #[test]
    fn rfc3339_is_converted_to_utc() {
        assert_eq!(
            ts("2026-05-29T19:42:36.467Z").to_string(),
            "2026-05-29 19:42:36.467"
        );
        assert_eq!(
            ts("2026-05-29t19:42:36z").to_string(),
            "2026-05-29 19:42:36.0"
        );
        assert_eq!(
            ts("2026-05-29T21:42:36.5+02:00").to_string(),
            "2026-05-29 19:42:36.5"
        );
        assert_eq!(
            ts("2026-05-29T19:42:36-05:30").to_string(),
            "2026-05-30 01:12:36.0"
        );
        assert_eq!(
            ts("2026-01-01T00:30:00+01:00").to_string(),
            "2025-12-31 23:30:00.0"
        );
        assert_eq!(ts("2026-05-29T19:42:36-00:00"), ts("2026-05-29 19:42:36"));
    }

    #[test]
    fn rejects_malformed_text() {
        for text in [
            "2026-13-01 00:00:00",
            "2026-02-30 00:00:00",
            "2026-05-29 19:42:36 ",
            " 2026-05-29 19:42:36",
            "2026-05-29 19:42:36.1234567890",
            "",
            "2026-05-29",
            "2026-05-29 19:42",
            "2026-05-29 24:00:00",
            "2026-05-29 19:60:00",
            "2026-05-29 19:42:60",
            "2026-05-29 19:42:36.",
            "2026-05-29 19:42:36Z",
            "2026-05-29T19:42:36",
            "2026-05-29T19:42:36+0200",
            "2026-05-29T19:42:36+24:00",
            "2026-05-29T19:42:36.1234567890Z",
            "2026-5-29 19:42:36",
            "26-05-29 19:42:36",
            "2026/05/29 19:42:36",
            "2026-05-29 19:42:36.4é",
            "0000-01-01T00:30:00+01:00",
            "9999-12-31T23:59:59-00:01",
        ] {
            assert!(Timestamp::parse(text).is_err(), "accepted {text:?}");
        }
    }

    #[test]
    fn errors_quote_the_text_and_say_what_was_expected() {
        let err = Timestamp::parse("2026-05-29 19:42:36 ").expect_err("must be rejected");
        assert_eq!(
            err,
            TimestampError::Syntax {
                text: "2026-05-29 19:42:36 ".into(),
                offset: 19,
                expected: "'.' and fraction digits, or the end of the text",
                found: "' '".into(),
            }
        );
        let message = err.to_string();
        assert!(message.contains("\"2026-05-29 19:42:36 \""), "{message}");
        assert!(message.contains("RFC 3339"), "{message}");

        let err = Timestamp::parse("2026-02-30 00:00:00").expect_err("must be rejected");
        assert!(
            matches!(&err, TimestampError::OutOfRange { field: "day", found, .. } if found == "30"),
            "{err:?}"
        );
        let err = Timestamp::parse("2026-05-29 19:42:36.1234567890").expect_err("must be rejected");
        assert!(
            matches!(&err, TimestampError::Syntax { offset: 29, found, .. } if found == "'0'"),
            "{err:?}"
        );
        let err = Timestamp::parse("").expect_err("must be rejected");
        assert!(
            matches!(&err, TimestampError::Syntax { offset: 0, found, .. } if found == "the end of the text"),
            "{err:?}"
        );
    }

    #[test]
    fn from_unix_rejects_out_of_range() {
        assert!(Timestamp::from_unix(0, 1_000_000_000).is_none());
        assert!(Timestamp::from_unix(MIN_SECS - 1, 0).is_none());
        assert!(Timestamp::from_unix(MAX_SECS + 1, 0).is_none());
        assert_eq!(
            Timestamp::from_unix(MIN_SECS, 0)
                .expect("in range")
                .to_string(),
            "0000-01-01 00:00:00.0"
        );
        assert_eq!(
            Timestamp::from_unix(MAX_SECS, 0)
                .expect("in range")
                .to_string(),
            "9999-12-31 23:59:59.0"
        );
    }

    #[test]
    fn now_is_in_range_and_round_trips() {
        let now = Timestamp::now();
        assert!(now.unix_secs() > 1_700_000_000);
        assert_eq!(
            Timestamp::parse(&now.to_string()).expect("valid timestamp"),
            now
        );
    }

    #[test]
    fn orders_chronologically() {
        assert!(ts("1969-12-31 23:59:59.9") < ts("1970-01-01 00:00:00"));
        assert!(ts("2026-05-29 19:42:36.1") < ts("2026-05-29 19:42:36.2"));
    }

    #[test]
    fn serde_uses_a_secs_nanos_pair() {
        let t = ts("2026-05-29 19:42:36.46732");
        let bytes = rmp_serde::to_vec(&t).expect("serialize");
        assert_eq!(
            bytes,
            rmp_serde::to_vec(&(1_780_083_756i64, 467_320_000u32)).expect("serialize")
        );
        assert_eq!(
            serde_json::to_string(&t).expect("serialize"),
            "[1780083756,467320000]"
        );
        assert_eq!(
            rmp_serde::from_slice::<Timestamp>(&bytes).expect("deserialize"),
            t
        );
    }

    #[test]
    fn serde_rejects_invalid_pairs() {
        let bad_nanos = rmp_serde::to_vec(&(0i64, 1_000_000_000u32)).expect("serialize");
        let err = rmp_serde::from_slice::<Timestamp>(&bad_nanos).expect_err("must be rejected");
        assert!(err.to_string().contains("found 1000000000"), "{err}");
        for secs in [MIN_SECS - 1, MAX_SECS + 1, i64::MIN, i64::MAX] {
            let bytes = rmp_serde::to_vec(&(secs, 0u32)).expect("serialize");
            assert!(
                rmp_serde::from_slice::<Timestamp>(&bytes).is_err(),
                "accepted {secs}"
            );
        }
        assert!(serde_json::from_str::<Timestamp>("[1, 2, 3]").is_err());
        assert!(serde_json::from_str::<Timestamp>("[1, -2]").is_err());
        assert!(serde_json::from_str::<Timestamp>("\"2026-05-29 19:42:36.0\"").is_err());
    }

    proptest! {
        #[test]
        fn any_valid_instant_round_trips(secs in MIN_SECS..=MAX_SECS, nanos in 0..NANOS_PER_SEC) {
            let t = Timestamp::from_unix(secs, nanos).expect("in range");
            let text = t.to_string();
            prop_assert_eq!(Timestamp::parse(&text).expect("valid timestamp"), t);
            let bytes = rmp_serde::to_vec(&t).expect("serialize");
            prop_assert_eq!(rmp_serde::from_slice::<Timestamp>(&bytes).expect("deserialize"), t);
        }
    }
}
