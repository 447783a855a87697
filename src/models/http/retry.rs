//! Which failed attempts are tried again, and after how long.

use std::time::{Duration, SystemTime};

use reqwest::header::{HeaderMap, RETRY_AFTER};

/// Statuses worth another attempt: rate limited (429), the provider's own
/// trouble (500, 502, 503, 504) and Anthropic's "overloaded" (529).
pub const RETRYABLE_STATUSES: [u16; 6] = [429, 500, 502, 503, 504, 529];

/// How failed attempts are retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first one included (1: never retry).
    pub max_attempts: u32,
    /// Ceiling of the first backoff; each later one doubles it.
    pub base_delay: Duration,
    /// Ceiling no backoff exceeds, however many attempts failed.
    pub max_delay: Duration,
    /// A provider asking to wait longer than this (`Retry-After`) is not
    /// waited for: the error is reported at once.
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 4,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
            max_retry_after: Duration::from_secs(120),
        }
    }
}

impl RetryPolicy {
    /// The ceiling of the wait after the `failures`-th failed attempt
    /// (1-based): `base_delay * 2^(failures-1)`, capped by `max_delay`.
    pub fn backoff_ceiling(&self, failures: u32) -> Duration {
        let factor = 1u32
            .checked_shl(failures.saturating_sub(1))
            .unwrap_or(u32::MAX);
        self.base_delay
            .checked_mul(factor)
            .unwrap_or(self.max_delay)
            .min(self.max_delay)
    }

    /// The wait after the `failures`-th failed attempt: "equal jitter", a
    /// random point in the upper half of the ceiling, so that clients that
    /// failed together do not retry together yet each still backs off.
    pub fn backoff(&self, failures: u32) -> Duration {
        let ceiling = self.backoff_ceiling(failures);
        let half = ceiling / 2;
        let spread = u64::try_from((ceiling - half).as_micros()).unwrap_or(u64::MAX);
        half + Duration::from_micros(fastrand::u64(0..=spread))
    }
}

/// The wait a response asks for: OpenAI's `retry-after-ms`, or the standard
/// `Retry-After` as seconds or as an HTTP date.
pub fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(millis) = text("retry-after-ms").and_then(|v| v.parse::<f64>().ok())
        && millis.is_finite()
        && millis >= 0.0
    {
        return Some(Duration::from_secs_f64(millis / 1000.0));
    }
    let value = text(RETRY_AFTER.as_str())?;
    if let Ok(seconds) = value.parse::<f64>() {
        return (seconds.is_finite() && seconds >= 0.0)
            .then(|| Duration::from_secs_f64(seconds.min(u32::MAX as f64)));
    }
    let date = httpdate::parse_http_date(value).ok()?;
    Some(date.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    #[test]
    fn backoff_doubles_within_bounds_and_is_capped() {
        let policy = RetryPolicy {
            max_attempts: 10,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(1_000),
            max_retry_after: Duration::from_secs(60),
        };
        let ceilings: Vec<u128> = (1..=6)
            .map(|n| policy.backoff_ceiling(n).as_millis())
            .collect();
        assert_eq!(ceilings, [100, 200, 400, 800, 1000, 1000]);
        assert_eq!(policy.backoff_ceiling(200), Duration::from_millis(1_000));
        for failures in 1..=8 {
            let ceiling = policy.backoff_ceiling(failures);
            for _ in 0..200 {
                let delay = policy.backoff(failures);
                assert!(delay >= ceiling / 2 && delay <= ceiling, "{delay:?}");
            }
        }
        let spread: std::collections::HashSet<Duration> =
            (0..50).map(|_| policy.backoff(3)).collect();
        assert!(spread.len() > 1, "backoff has no jitter");
    }

    #[test]
    fn retry_after_reads_seconds_milliseconds_and_dates() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let headers = |pairs: &[(&'static str, &str)]| {
            let mut map = HeaderMap::new();
            for (name, value) in pairs {
                map.insert(*name, HeaderValue::from_str(value).unwrap());
            }
            map
        };
        assert_eq!(
            retry_after(&headers(&[("retry-after", "7")]), now),
            Some(Duration::from_secs(7))
        );
        assert_eq!(
            retry_after(&headers(&[("retry-after", "1.5")]), now),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(
            retry_after(
                &headers(&[("retry-after", "3"), ("retry-after-ms", "250")]),
                now
            ),
            Some(Duration::from_millis(250))
        );
        let date = httpdate::fmt_http_date(now + Duration::from_secs(30));
        assert_eq!(
            retry_after(&headers(&[("retry-after", &date)]), now),
            Some(Duration::from_secs(30))
        );
        let past = httpdate::fmt_http_date(now - Duration::from_secs(30));
        assert_eq!(
            retry_after(&headers(&[("retry-after", &past)]), now),
            Some(Duration::ZERO)
        );
        assert_eq!(retry_after(&headers(&[("retry-after", "soon")]), now), None);
        assert_eq!(retry_after(&headers(&[("retry-after", "-1")]), now), None);
        assert_eq!(retry_after(&HeaderMap::new(), now), None);
    }
}
