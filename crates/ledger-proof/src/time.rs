//! The one canonical way a checkpoint writes its time.
//!
//! Signed texts include the time, so the text must be rebuilt byte for byte from a parsed
//! checkpoint. This module fixes one form: RFC 3339 in UTC with whole seconds and a capital `Z`,
//! `YYYY-MM-DDTHH:MM:SSZ` (for example `2025-03-01T09:30:00Z`), years 0000 to 9999. Anything else
//! (fractions, offsets, lower-case `z`, leap seconds) is refused on input rather than normalised,
//! so that a signed text is never reinterpreted.

use chrono::{DateTime, NaiveDateTime, SubsecRound, Timelike, Utc};
use thiserror::Error;

/// The `strftime` pattern of the canonical form.
const FORMAT: &str = "%Y-%m-%dT%H:%M:%SZ";

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
        if !(0..=9999).contains(&chrono::Datelike::year(&time)) {
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
    pub fn parse(text: &str) -> Result<Self, TimeError> {
        let not_canonical = || TimeError::NotCanonical {
            text: text.chars().take(64).collect(),
        };
        let naive = NaiveDateTime::parse_from_str(text, FORMAT).map_err(|_| not_canonical())?;
        // A leap second parses as a second with a fraction of 1 s or more; refuse it, and any
        // spelling (unpadded fields, signs) that does not print back to the same text.
        if naive.nanosecond() != 0 {
            return Err(not_canonical());
        }
        let time = Self::from_datetime(naive.and_utc())?;
        if time.to_string() != text {
            return Err(not_canonical());
        }
        Ok(time)
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
        write!(f, "{}", self.0.format(FORMAT))
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
