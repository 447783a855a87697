//! Models the harness can drive.

pub mod scripted;

pub use scripted::ScriptedModel;
