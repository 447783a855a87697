//! The provider adapters and model profiles, against mock providers on
//! loopback that answer with the providers' documented shapes.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

mod anthropic;
mod cancellation;
mod fixtures;
mod openai;
mod profiles;
mod retries;
mod secrets;
mod streaming;
mod support;
