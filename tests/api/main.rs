//! The service as its users meet it: the real server on a free port, a real
//! SQLite file in a temporary directory, real HTTP.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

mod helpers;

mod agents;
mod attempts;
mod blocks;
mod browsers;
mod cancel;
mod checks;
mod cli;
mod compaction;
mod connections;
mod console;
mod conversations;
mod cost;
mod deploy;
mod downloads;
mod drafts;
mod durable;
mod errors;
mod eval;
mod eventsource;
mod examples;
mod fairness;
mod hostile;
mod installs;
mod lifecycle;
mod mcp;
mod metrics;
mod multitask;
mod openapi;
mod operations;
mod otlp;
mod patches;
mod pauses;
mod postgres;
mod providers;
mod quickstart;
mod quotas;
mod replay;
mod replicas;
mod repositories;
mod retention;
mod run_size;
mod runs;
mod sandbox;
mod scenarios;
mod schedule_replicas;
mod schedules;
mod secrets;
mod slow_clients;
mod sse;
mod stalls;
mod startup;
mod statuses;
mod storage;
mod tenants;
mod tools;
mod traces;
mod unchanged;
mod unread;
mod webhook_hosts;
mod webhooks;
mod writer;
