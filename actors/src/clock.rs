//! Time stamps: the current time in milliseconds, and times as RFC 3339 text (every log event
//! and file time gm reports).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// Now, as RFC 3339 in UTC with millisecond precision.
pub fn now_rfc3339() -> String {
    let since_epoch = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    rfc3339_millis(since_epoch)
}

/// `since_epoch` as `2026-12-02T17:53:22.123Z`.
fn rfc3339_millis(since_epoch: Duration) -> String {
    let millis = since_epoch.subsec_millis();
    with_second(&NOW_SECOND, since_epoch.as_secs(), |second, out| {
        out.push_str(second);
        out.push('.');
        for d in [millis / 100, millis / 10 % 10, millis % 10] {
            out.push(char::from(b'0' + d as u8));
        }
        out.push('Z');
    })
}

/// `t` in RFC 3339 as the `time` crate's well-known format writes it: the fraction of a
/// second only when there is one, without trailing zeros (`2026-12-02T17:53:22.5Z`).
pub fn rfc3339(t: std::time::SystemTime) -> String {
    match t.duration_since(std::time::UNIX_EPOCH) {
        Ok(since_epoch) => {
            let nanos = since_epoch.subsec_nanos();
            with_second(&OTHER_SECOND, since_epoch.as_secs(), |second, out| {
                out.push_str(second);
                if nanos > 0 {
                    let digits = format!("{nanos:09}");
                    out.push('.');
                    out.push_str(digits.trim_end_matches('0'));
                }
                out.push('Z');
            })
        }
        // Before 1970: rare enough for the general formatter.
        Err(_) => {
            time::OffsetDateTime::from(t).format(&time::format_description::well_known::Rfc3339).unwrap_or_default()
        }
    }
}

/// A date and time to the second, `YYYY-MM-DDTHH:MM:SS`, kept while the second stays the same:
/// every event is stamped, and formatting a date costs more than the rest of an event.
type SecondCache = std::cell::RefCell<(u64, String)>;

thread_local! {
    /// For the current time (event stamps).
    static NOW_SECOND: SecondCache = const { std::cell::RefCell::new((0, String::new())) };
    /// For other times (file mtimes), so that they do not evict the current second.
    static OTHER_SECOND: SecondCache = const { std::cell::RefCell::new((0, String::new())) };
}

/// Calls `write` with `secs` formatted as `YYYY-MM-DDTHH:MM:SS` (from `cache` when it holds
/// that second) and the output string.
fn with_second(
    cache: &'static std::thread::LocalKey<SecondCache>,
    secs: u64,
    write: impl FnOnce(&str, &mut String),
) -> String {
    cache.with(|cell| {
        let mut cached = cell.borrow_mut();
        if cached.0 != secs || cached.1.is_empty() {
            let t = time::OffsetDateTime::from_unix_timestamp(secs as i64).unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
            let format = time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]:[second]");
            *cached = (secs, t.format(&format).unwrap_or_default());
        }
        let mut out = String::with_capacity(cached.1.len() + 11);
        write(&cached.1, &mut out);
        out
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_match_the_rfc3339_formatter_to_the_millisecond() {
        let format =
            time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z");
        for nanos in [0u128, 1_700_000_000_123_456_789, 1_780_000_000_999_999_999, 1_780_000_000_005_000_000] {
            let d = Duration::from_nanos(nanos as u64);
            let t = time::OffsetDateTime::from_unix_timestamp_nanos(nanos as i128).expect("in range");
            assert_eq!(rfc3339_millis(d), t.format(&format).expect("formats"));
            assert_eq!(rfc3339_millis(d), t.format(&format).expect("formats"), "from the cached second");
        }
    }

    #[test]
    fn rfc3339_matches_the_well_known_formatter() {
        let well_known = time::format_description::well_known::Rfc3339;
        for nanos in [
            0u64,
            1_700_000_000_000_000_000,
            1_700_000_000_500_000_000,
            1_700_000_000_123_456_789,
            1_700_000_000_000_000_010,
        ] {
            let t = std::time::UNIX_EPOCH + Duration::from_nanos(nanos);
            let expected = time::OffsetDateTime::from(t).format(&well_known).expect("formats");
            assert_eq!(rfc3339(t), expected);
        }
        let before = std::time::UNIX_EPOCH - Duration::from_secs(86_400);
        assert_eq!(rfc3339(before), "1969-12-31T00:00:00Z");
    }
}
