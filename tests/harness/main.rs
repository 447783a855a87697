//! The harness, driven end to end by scripted models: no network, no real model.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

mod support;

mod budgets;
mod cancellation;
mod context;
mod events;
mod failures;
mod output;
mod pause;
mod tools;
