//! What model calls used and cost: one response's usage, a run's totals,
//! and the price that turns tokens into US dollars.

use serde::{Deserialize, Serialize};

/// Largest token count accepted, per response and in total: the largest integer
/// a JSON client that reads numbers as doubles still holds exactly (2^53 - 1).
pub const MAX_TOKEN_COUNT: u64 = (1 << 53) - 1;

/// Token usage as a provider reported it for one response; any count may be
/// missing. `input_tokens` is every input token, those read from or written
/// to a prompt cache included.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
    /// Input tokens read from the provider's prompt cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_input_tokens: Option<u64>,
    /// Input tokens written to the provider's prompt cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_tokens: Option<u64>,
    /// What the call cost, when its profile has a price (set by the
    /// harness, never by a provider).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

impl Usage {
    /// The token counts, for range checks.
    pub fn counts(&self) -> [Option<u64>; 4] {
        [
            self.input_tokens,
            self.output_tokens,
            self.cached_input_tokens,
            self.cache_write_tokens,
        ]
    }
}

/// Usage accumulated over a run. `model_calls_with_usage` tells how many
/// responses carried usage at all: zero means unknown, not free.
/// `cost_usd` is the calls' cost summed, null when a call's cost is unknown
/// (it reported no usage, or its profile has no price).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct UsageTotals {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub model_calls_with_usage: u64,
    #[serde(default)]
    pub cached_input_tokens: u64,
    #[serde(default)]
    pub cache_write_tokens: u64,
    #[serde(default)]
    pub cost_usd: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UsageError {
    #[error("model usage counts must be nonnegative integers no larger than {MAX_TOKEN_COUNT}")]
    InvalidCount,
    #[error("accumulated model usage exceeds {MAX_TOKEN_COUNT}")]
    Overflow,
}

impl UsageTotals {
    /// Totals of a run that has made no call yet: its cost is zero when its
    /// model has a price, unknown otherwise.
    pub fn starting(priced: bool) -> Self {
        Self {
            cost_usd: priced.then_some(0.0),
            ..Self::default()
        }
    }

    /// Adds one response's usage, refusing counts that are out of range or
    /// whose totals would be. On error the totals are left unchanged.
    pub fn add(&mut self, usage: &Usage) -> Result<(), UsageError> {
        if usage
            .counts()
            .into_iter()
            .flatten()
            .any(|n| n > MAX_TOKEN_COUNT)
        {
            return Err(UsageError::InvalidCount);
        }
        let sum = |total: u64, count: Option<u64>| {
            Some(total + count.unwrap_or(0)).filter(|&n| n <= MAX_TOKEN_COUNT)
        };
        let (Some(input), Some(output), Some(cached), Some(written)) = (
            sum(self.input_tokens, usage.input_tokens),
            sum(self.output_tokens, usage.output_tokens),
            sum(self.cached_input_tokens, usage.cached_input_tokens),
            sum(self.cache_write_tokens, usage.cache_write_tokens),
        ) else {
            return Err(UsageError::Overflow);
        };
        self.input_tokens = input;
        self.output_tokens = output;
        self.cached_input_tokens = cached;
        self.cache_write_tokens = written;
        self.model_calls_with_usage += 1;
        self.add_cost(usage.cost_usd);
        Ok(())
    }

    /// Adds a call's cost; an unknown one makes the total unknown.
    pub fn add_cost(&mut self, cost: Option<f64>) {
        self.cost_usd = match (self.cost_usd, cost) {
            (Some(total), Some(cost)) => Some(total + cost),
            _ => None,
        };
    }

    /// The sum of `self` and `other` (a run's and one of its attempts'),
    /// saturating.
    pub fn plus(&self, other: &Self) -> Self {
        let add = |a: u64, b: u64| a.saturating_add(b).min(MAX_TOKEN_COUNT);
        let mut sum = Self {
            input_tokens: add(self.input_tokens, other.input_tokens),
            output_tokens: add(self.output_tokens, other.output_tokens),
            model_calls_with_usage: self
                .model_calls_with_usage
                .saturating_add(other.model_calls_with_usage),
            cached_input_tokens: add(self.cached_input_tokens, other.cached_input_tokens),
            cache_write_tokens: add(self.cache_write_tokens, other.cache_write_tokens),
            cost_usd: self.cost_usd,
        };
        sum.add_cost(other.cost_usd);
        sum
    }
}

/// What a model's tokens cost, in US dollars per million tokens (a
/// profile's `price`). Cached input and cache writes cost what input does
/// unless priced apart.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    pub input: f64,
    pub output: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_input: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write: Option<f64>,
}

impl Price {
    /// Why this price cannot be used, if it cannot: each figure must be a
    /// finite number, zero or more.
    pub fn check(&self) -> Result<(), String> {
        let figures = [
            ("input", Some(self.input)),
            ("output", Some(self.output)),
            ("cached_input", self.cached_input),
            ("cache_write", self.cache_write),
        ];
        for (name, value) in figures {
            if let Some(value) = value
                && !(value.is_finite() && value >= 0.0)
            {
                return Err(format!(
                    "price.{name} must be a number of US dollars per million tokens, zero or more (got {value})"
                ));
            }
        }
        Ok(())
    }

    /// What a call with `usage` cost: its uncached input at the input
    /// price, its cached input and cache writes at theirs, its output at
    /// the output price.
    pub fn cost(&self, usage: &Usage) -> f64 {
        let tokens = |count: Option<u64>| count.unwrap_or(0) as f64;
        let cached = tokens(usage.cached_input_tokens);
        let written = tokens(usage.cache_write_tokens);
        let uncached = (tokens(usage.input_tokens) - cached - written).max(0.0);
        (uncached * self.input
            + cached * self.cached_input.unwrap_or(self.input)
            + written * self.cache_write.unwrap_or(self.input)
            + tokens(usage.output_tokens) * self.output)
            / 1_000_000.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(input: Option<u64>, output: Option<u64>) -> Usage {
        Usage {
            input_tokens: input,
            output_tokens: output,
            ..Usage::default()
        }
    }

    #[test]
    fn usage_accumulates_and_refuses_overflow_without_change() {
        let mut totals = UsageTotals::default();
        totals.add(&tokens(Some(12), None)).unwrap();
        totals.add(&Usage::default()).unwrap();
        assert_eq!(
            totals,
            UsageTotals {
                input_tokens: 12,
                model_calls_with_usage: 2,
                ..UsageTotals::default()
            }
        );
        let before = totals;
        assert_eq!(
            totals.add(&tokens(Some(MAX_TOKEN_COUNT), None)),
            Err(UsageError::Overflow)
        );
        assert_eq!(
            totals.add(&tokens(None, Some(MAX_TOKEN_COUNT + 1))),
            Err(UsageError::InvalidCount)
        );
        assert_eq!(
            totals.add(&Usage {
                cached_input_tokens: Some(MAX_TOKEN_COUNT + 1),
                ..Usage::default()
            }),
            Err(UsageError::InvalidCount)
        );
        assert_eq!(totals, before);
    }

    #[test]
    fn cost_is_known_only_while_every_call_is_priced() {
        let mut totals = UsageTotals::starting(true);
        assert_eq!(totals.cost_usd, Some(0.0));
        for cost in [0.5, 0.25] {
            totals
                .add(&Usage {
                    cost_usd: Some(cost),
                    ..tokens(Some(1), Some(1))
                })
                .unwrap();
        }
        assert_eq!(totals.cost_usd, Some(0.75));
        totals.add(&tokens(Some(1), Some(1))).unwrap();
        assert_eq!(totals.cost_usd, None, "a call without a cost");
        totals.add_cost(Some(1.0));
        assert_eq!(totals.cost_usd, None, "unknown stays unknown");
        assert_eq!(UsageTotals::starting(false).cost_usd, None);
    }

    #[test]
    fn a_price_charges_cached_and_written_input_apart() {
        let price = Price {
            input: 3.0,
            output: 15.0,
            cached_input: Some(0.3),
            cache_write: Some(3.75),
        };
        let usage = Usage {
            input_tokens: Some(1_000_000),
            output_tokens: Some(100_000),
            cached_input_tokens: Some(600_000),
            cache_write_tokens: Some(200_000),
            cost_usd: None,
        };
        // 200k uncached at 3, 600k cached at 0.3, 200k written at 3.75,
        // 100k out at 15.
        let expected = 0.6 + 0.18 + 0.75 + 1.5;
        assert!((price.cost(&usage) - expected).abs() < 1e-12);
        let plain = Price {
            cached_input: None,
            cache_write: None,
            ..price
        };
        assert!((plain.cost(&usage) - (3.0 + 1.5)).abs() < 1e-12);
        assert!(
            Price {
                input: -1.0,
                ..price
            }
            .check()
            .unwrap_err()
            .contains("price.input")
        );
        assert!(
            Price {
                cache_write: Some(f64::NAN),
                ..price
            }
            .check()
            .is_err()
        );
        assert_eq!(price.check(), Ok(()));
    }
}
