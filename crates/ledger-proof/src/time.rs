//! The one canonical way a checkpoint writes its time.
//!
//! Signed texts include the time, so the text must be rebuilt byte for byte from a parsed
//! checkpoint. This module fixes one form: RFC 3339 in UTC with whole seconds and a capital `Z`,
//! `YYYY-MM-DDTHH:MM:SSZ` (for example `2025-03-01T09:30:00Z`), years 0000 to 9999. Anything else
//! (fractions, offsets, lower-case `z`, leap seconds) is refused on input rather than normalised,
//! so that a signed text is never reinterpreted.

use chrono::{DateTime, Datelike, NaiveDate, NaiveTime, SubsecRound, Timelike, Utc};
use thiserror::Error;

/// A UTC time with whole seconds, written `YYYY-MM-DDTHH:MM:SSZ`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Timestamp(DateTime<Utc>);

/// Why a time was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum TimeError {
    /// The text is not in the canonical form `YYYY-MM-DDTHH:MM:SSZ`.
    #[error("{text:?} is not a time of the form YYYY-MM-DDTHH:MM:SSZ")]
    NotCanonical {
        /// The text refused.
        text: String,
    },
    /// The year lies outside 0000–9999, which RFC 3339 cannot write.
    #[error("the time lies outside the years 0000 to 9999")]
    OutOfRange,
}

impl Timestamp {
    /// The time `time` with its fraction of a second dropped.
    pub fn from_datetime(time: DateTime<Utc>) -> Result<Self, TimeError> {
        let time = time.trunc_subsecs(0);
        if !(0..=9999).contains(&time.year()) {
            return Err(TimeError::OutOfRange);
        }
        Ok(Self(time))
    }

    /// The time `seconds` after 1970-01-01T00:00:00Z.
    pub fn from_unix_seconds(seconds: i64) -> Result<Self, TimeError> {
        DateTime::from_timestamp(seconds, 0)
            .ok_or(TimeError::OutOfRange)
            .and_then(Self::from_datetime)
    }

    /// Parses the canonical form, and nothing else.
    ///
    /// Read field by field rather than through a `strftime` pattern: every checkpoint entry
    /// holds a time, and an open or a verification reads every entry of the checkpoint log.
    pub fn parse(text: &str) -> Result<Self, TimeError> {
        let not_canonical = || TimeError::NotCanonical {
            text: text.chars().take(64).collect(),
        };
        let bytes: &[u8; 20] = text.as_bytes().try_into().map_err(|_| not_canonical())?;
        // Separators where the form puts them, and decimal digits everywhere else: no sign,
        // space, fraction or offset can pass.
        let separators = [
            (4, b'-'),
            (7, b'-'),
            (10, b'T'),
            (13, b':'),
            (16, b':'),
            (19, b'Z'),
        ];
        for (i, b) in bytes.iter().enumerate() {
            let ok = match separators.iter().find(|(at, _)| *at == i) {
                Some((_, sep)) => b == sep,
                None => b.is_ascii_digit(),
            };
            if !ok {
                return Err(not_canonical());
            }
        }
        let number = |from: usize, to: usize| {
            bytes[from..to]
                .iter()
                .fold(0u32, |n, d| n * 10 + u32::from(d - b'0'))
        };
        let year = i32::try_from(number(0, 4)).map_err(|_| not_canonical())?;
        // `from_ymd_opt` refuses days a month does not have, `from_hms_opt` a 60th second.
        let date =
            NaiveDate::from_ymd_opt(year, number(5, 7), number(8, 10)).ok_or_else(not_canonical)?;
        let time = NaiveTime::from_hms_opt(number(11, 13), number(14, 16), number(17, 19))
            .ok_or_else(not_canonical)?;
        Self::from_datetime(date.and_time(time).and_utc())
    }

    /// The time as a `chrono` value.
    pub fn as_datetime(&self) -> DateTime<Utc> {
        self.0
    }

    /// Seconds since 1970-01-01T00:00:00Z.
    pub fn unix_seconds(&self) -> i64 {
        self.0.timestamp()
    }
}

impl std::fmt::Display for Timestamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The years are 0000–9999 (`from_datetime`), so four digits always suffice.
        let t = &self.0;
        write!(
            f,
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
            t.year(),
            t.month(),
            t.day(),
            t.hour(),
            t.minute(),
            t.second()
        )
    }
}

impl std::str::FromStr for Timestamp {
    type Err = TimeError;

    fn from_str(text: &str) -> Result<Self, TimeError> {
        Self::parse(text)
    }
}

impl serde::Serialize for Timestamp {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Timestamp {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        Self::parse(&text).map_err(serde::de::Error::custom)
    }
}
