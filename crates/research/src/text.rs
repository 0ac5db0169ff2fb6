//! Text rules shared by validation and display: counting characters, naming a source, reading
//! dates.
//!
//! Users write in English and Chinese, so lengths are counted in Unicode scalar values and text
//! is cut only on character boundaries.

use chrono::{DateTime, NaiveDate, Utc};

/// Length in Unicode scalar values, the unit of every `…_chars_max` limit.
pub fn char_count(text: &str) -> u64 {
    text.chars().count() as u64
}

/// At most `max` characters of `text`, with `…` when something was cut.
pub fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// Collapses whitespace runs and lower-cases, so that two sub-questions that differ only in
/// spacing or case are recognised as the same.
pub(crate) fn comparable(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

/// Why a source could not be named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceNameError {
    /// Neither a publisher nor a URL was given.
    Missing,
    /// The text looked like a URL but has no host.
    NoHost,
}

/// The normalised `source` of an evidence item: the publisher as given, trimmed and lower case;
/// or, when the publisher is a URL or absent, the host of the URL without `www.`.
pub fn normalise_source(
    publisher: Option<&str>,
    url: Option<&str>,
) -> Result<String, SourceNameError> {
    if let Some(publisher) = publisher.map(str::trim).filter(|p| !p.is_empty()) {
        if looks_like_url(publisher) {
            return url_host(publisher).ok_or(SourceNameError::NoHost);
        }
        return Ok(publisher.to_lowercase());
    }
    match url.map(str::trim).filter(|u| !u.is_empty()) {
        Some(url) => url_host(url).ok_or(SourceNameError::NoHost),
        None => Err(SourceNameError::Missing),
    }
}

fn looks_like_url(text: &str) -> bool {
    text.contains("://")
        || (text.to_ascii_lowercase().starts_with("www.") && !text.contains(char::is_whitespace))
}

/// The host of a URL, lower case, without `www.`, user info or port. `None` when there is none.
pub fn url_host(url: &str) -> Option<String> {
    let rest = match url.find("://") {
        Some(at) => &url[at + 3..],
        None => url,
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host_port = match authority.rfind('@') {
        Some(at) => &authority[at + 1..],
        None => authority,
    };
    let host = if let Some(inner) = host_port.strip_prefix('[') {
        // An IPv6 literal: keep what is between the brackets.
        inner.split(']').next().unwrap_or_default()
    } else {
        host_port.split(':').next().unwrap_or_default()
    };
    let host = host.trim().trim_end_matches('.').to_lowercase();
    let host = host
        .strip_prefix("www.")
        .map(str::to_string)
        .unwrap_or(host);
    if host.is_empty() || host.contains(char::is_whitespace) {
        None
    } else {
        Some(host)
    }
}

/// Reads a calendar date: `YYYY-MM-DD`, or an RFC 3339 timestamp taken as its UTC date.
pub fn parse_date(text: &str) -> Option<NaiveDate> {
    let text = text.trim();
    if let Ok(date) = NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        return Some(date);
    }
    DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|t| t.with_timezone(&Utc).date_naive())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn characters_not_bytes() {
        assert_eq!(char_count("产能增速"), 4);
        assert_eq!("产能增速".len(), 12);
        assert_eq!(shorten("产能增速是否超过", 4), "产能增…");
        assert_eq!(shorten("abc", 4), "abc");
    }

    #[test]
    fn source_is_publisher_or_url_host() {
        assert_eq!(
            normalise_source(Some("  Example Daily "), None),
            Ok("example daily".into())
        );
        assert_eq!(
            normalise_source(None, Some("https://www.Example.org/a/b?x=1")),
            Ok("example.org".into())
        );
        assert_eq!(
            normalise_source(Some("https://user@www.stats.example.gov:8443/x"), None),
            Ok("stats.example.gov".into())
        );
        assert_eq!(
            normalise_source(Some("www.example.org/page"), None),
            Ok("example.org".into())
        );
        assert_eq!(
            normalise_source(Some("  "), Some("http://[::1]:80/")),
            Ok("::1".into())
        );
        assert_eq!(
            normalise_source(Some("某行业报告"), None),
            Ok("某行业报告".into())
        );
        assert_eq!(normalise_source(None, None), Err(SourceNameError::Missing));
        assert_eq!(
            normalise_source(None, Some("https:///path")),
            Err(SourceNameError::NoHost)
        );
    }

    #[test]
    fn dates_in_two_shapes() {
        let day = NaiveDate::from_ymd_opt(2024, 6, 1).unwrap();
        assert_eq!(parse_date("2024-06-01"), Some(day));
        assert_eq!(
            parse_date("2024-06-01T23:30:00-02:00"),
            NaiveDate::from_ymd_opt(2024, 6, 2)
        );
        assert_eq!(parse_date("2024-13-01"), None);
        assert_eq!(parse_date("June 1st"), None);
        assert_eq!(parse_date(""), None);
    }

    #[test]
    fn comparable_ignores_case_and_spacing() {
        assert_eq!(
            comparable("  Is  Demand\tGrowing? "),
            comparable("is demand growing?")
        );
    }
}
