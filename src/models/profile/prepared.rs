//! Validated profiles, ready to give each run its model.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::harness::Model;
use crate::harness::agent::{FallbackModel, Fallbacks};
use crate::models::anthropic::AnthropicModel;
use crate::models::openai::OpenAiModel;
use crate::models::scripted::ScriptedModel;

use super::resolve::Resolved;
use super::{DEMO_PROFILE, EnvLookup, ModelProfile, ProfileError, ProfileKind};

impl ModelProfile {
    /// Validates the profile and prepares it for runs: an HTTP profile gets
    /// its client (and connection pool), built once and shared by its runs;
    /// a scripted one keeps its parsed script.
    pub fn prepare(&self, name: &str, env: EnvLookup<'_>) -> Result<PreparedProfile, ProfileError> {
        let error = |message: String| ProfileError::new(name, message);
        let source = match self.resolve(name, env)? {
            Resolved::Scripted(script) => Source::Scripted(script.into()),
            Resolved::OpenAi(config) => Source::Http(Arc::new(
                OpenAiModel::new(config).map_err(|e| error(e.to_string()))?,
            )),
            Resolved::Anthropic(config) => Source::Http(Arc::new(
                AnthropicModel::new(config).map_err(|e| error(e.to_string()))?,
            )),
        };
        let (model, temperature) = match self {
            Self::OpenAi(profile) | Self::Anthropic(profile) => {
                (profile.model.clone(), profile.temperature)
            }
            Self::Scripted(_) => (None, None),
        };
        Ok(PreparedProfile {
            kind: self.kind(),
            model,
            temperature,
            instructions: self.instructions().map(str::to_owned),
            loop_settings: self.loop_settings(),
            price: self.price(),
            compaction_at: self.compaction_at(),
            fallback: Vec::new(),
            source,
        })
    }

    /// A model for one run, built from scratch (prefer [`ModelProfiles`],
    /// which shares an HTTP profile's client between runs).
    pub fn build(&self, name: &str, env: EnvLookup<'_>) -> Result<Arc<dyn Model>, ProfileError> {
        Ok(self.prepare(name, env)?.instantiate())
    }
}

/// What a model source is for a prepared profile.
#[derive(Clone)]
enum Source {
    /// A fresh scripted model per run, each starting at the top.
    Scripted(Arc<[Value]>),
    /// One stateless adapter shared by every run of the profile.
    Http(Arc<dyn Model>),
}

/// A validated profile, ready to give each run its model.
#[derive(Clone)]
pub struct PreparedProfile {
    kind: ProfileKind,
    model: Option<String>,
    temperature: Option<f64>,
    instructions: Option<String>,
    loop_settings: super::LoopSettings,
    price: Option<crate::harness::Price>,
    compaction_at: Option<f64>,
    /// The profiles its model calls fall back to, in turn: its `fallback`,
    /// each followed by that profile's own chain, each profile once.
    fallback: Vec<String>,
    source: Source,
}

impl PreparedProfile {
    pub fn kind(&self) -> ProfileKind {
        self.kind
    }

    /// The provider's model id, for HTTP profiles.
    pub fn model(&self) -> Option<&str> {
        self.model.as_deref()
    }

    /// The system prompt of a run of this profile that gives none.
    pub fn instructions(&self) -> Option<&str> {
        self.instructions.as_deref()
    }

    /// The temperature its model is sent with, if the profile sets one.
    pub fn temperature(&self) -> Option<f64> {
        self.temperature
    }

    /// How the loop treats this profile's model (what it leaves unset is
    /// the server's).
    pub fn loop_settings(&self) -> super::LoopSettings {
        self.loop_settings
    }

    /// What its tokens cost, if the profile has a price.
    pub fn price(&self) -> Option<crate::harness::Price> {
        self.price
    }

    /// The share of their context at which its runs compact by default.
    pub fn compaction_at(&self) -> Option<f64> {
        self.compaction_at
    }

    /// The profiles its model calls fall back to, in turn (its `fallback`,
    /// each followed by that profile's own chain).
    pub fn fallback(&self) -> &[String] {
        &self.fallback
    }

    /// The model for one run.
    pub fn instantiate(&self) -> Arc<dyn Model> {
        self.instantiate_after(0)
    }

    /// The model for a run that resumes after `steps` responses: a script
    /// goes on from the next one (a provider is stateless).
    pub fn instantiate_after(&self, steps: usize) -> Arc<dyn Model> {
        match &self.source {
            Source::Scripted(script) => Arc::new(ScriptedModel::new(
                script.get(steps..).unwrap_or_default().iter().cloned(),
            )),
            Source::Http(model) => Arc::clone(model),
        }
    }
}

impl fmt::Debug for PreparedProfile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PreparedProfile")
            .field("kind", &self.kind)
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

/// A profile as `GET /v1/models` lists it: no settings, no secrets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProfileInfo {
    pub name: String,
    pub kind: ProfileKind,
}

/// Every profile of the server, validated and prepared at start-up.
///
/// ```
/// use std::collections::BTreeMap;
/// use agent_runner::models::{ModelProfile, ModelProfiles, ProfileKind, process_env};
///
/// #[derive(serde::Deserialize)]
/// struct Config {
///     #[serde(default)]
///     models: BTreeMap<String, ModelProfile>,
/// }
///
/// let config: Config = toml::from_str(
///     r#"
///     [models.local]
///     kind = "openai"
///     base_url = "http://127.0.0.1:11434/v1"
///     model = "qwen2.5-coder"
///     "#,
/// )
/// .expect("a valid configuration");
/// let profiles = ModelProfiles::new(config.models, &process_env).expect("usable profiles");
/// let names: Vec<(String, ProfileKind)> =
///     profiles.list().into_iter().map(|p| (p.name, p.kind)).collect();
/// assert_eq!(
///     names,
///     [("demo".into(), ProfileKind::Scripted), ("local".into(), ProfileKind::OpenAi)]
/// );
/// // One model per run; an HTTP profile's is shared, a scripted one's fresh.
/// let model = profiles.instantiate("local").expect("a configured profile");
/// # drop(model);
/// ```
#[derive(Debug, Clone, Default)]
pub struct ModelProfiles {
    profiles: BTreeMap<String, PreparedProfile>,
}

impl ModelProfiles {
    /// Validates and prepares every profile (the `[models]` table), adding
    /// the built-in `demo` unless the configuration defines its own. Fails on
    /// the first profile that is not usable, naming it, and on a `fallback`
    /// that names no profile or makes a cycle.
    pub fn new(
        profiles: impl IntoIterator<Item = (String, ModelProfile)>,
        env: EnvLookup<'_>,
    ) -> Result<Self, ProfileError> {
        let mut prepared = BTreeMap::new();
        let mut written = BTreeMap::new();
        for (name, profile) in profiles {
            let ready = profile.prepare(&name, env)?;
            prepared.insert(name.clone(), ready);
            written.insert(name, profile.fallback().to_vec());
        }
        if !prepared.contains_key(DEMO_PROFILE) {
            let demo = ModelProfile::demo().prepare(DEMO_PROFILE, env)?;
            prepared.insert(DEMO_PROFILE.to_owned(), demo);
            written.insert(DEMO_PROFILE.to_owned(), Vec::new());
        }
        for (name, profile) in &mut prepared {
            let mut path = vec![name.as_str()];
            profile.fallback = fallback_chain(&written, &mut path)?;
        }
        Ok(Self { profiles: prepared })
    }

    pub fn get(&self, name: &str) -> Option<&PreparedProfile> {
        self.profiles.get(name)
    }

    pub fn contains(&self, name: &str) -> bool {
        self.profiles.contains_key(name)
    }

    /// The model for one run of the profile `name`.
    pub fn instantiate(&self, name: &str) -> Option<Arc<dyn Model>> {
        self.get(name).map(PreparedProfile::instantiate)
    }

    /// Where the model calls of a run of the profile `name` go when its
    /// provider is unavailable: a model for each profile of its chain (a
    /// scripted one from the top), or `None` without a chain.
    pub fn fallbacks(&self, name: &str) -> Option<Arc<Fallbacks>> {
        let chain = self.get(name)?.fallback();
        if chain.is_empty() {
            return None;
        }
        let chain = chain
            .iter()
            .filter_map(|profile| {
                let prepared = self.get(profile)?;
                Some(FallbackModel {
                    profile: profile.clone(),
                    model: prepared.instantiate(),
                    price: prepared.price(),
                })
            })
            .collect();
        Some(Arc::new(Fallbacks {
            from: name.to_owned(),
            chain,
        }))
    }

    /// Names and kinds, sorted by name.
    pub fn list(&self) -> Vec<ProfileInfo> {
        self.profiles
            .iter()
            .map(|(name, profile)| ProfileInfo {
                name: name.clone(),
                kind: profile.kind,
            })
            .collect()
    }
}

/// The chain of the profile last in `path` (the profiles that led to it,
/// first the one whose chain this is): each profile its `fallback` names,
/// followed by that profile's chain, each profile once (the first time).
/// A name that is no profile, or one already on `path`, refuses the
/// configuration.
fn fallback_chain<'a>(
    written: &'a BTreeMap<String, Vec<String>>,
    path: &mut Vec<&'a str>,
) -> Result<Vec<String>, ProfileError> {
    let name = *path.last().expect("a profile");
    let root = path[0];
    let mut chain: Vec<String> = Vec::new();
    for next in &written[name] {
        let Some((next, _)) = written.get_key_value(next) else {
            return Err(ProfileError::new(
                root,
                format!("`fallback` of `{name}` names `{next}`, which is not a model profile"),
            ));
        };
        if path.contains(&next.as_str()) {
            let cycle: Vec<&str> = path.iter().copied().chain([next.as_str()]).collect();
            return Err(ProfileError::new(
                root,
                format!("`fallback` makes a cycle: {}", cycle.join(" -> ")),
            ));
        }
        path.push(next);
        let further = fallback_chain(written, path)?;
        path.pop();
        for profile in std::iter::once(next.clone()).chain(further) {
            if !chain.contains(&profile) {
                chain.push(profile);
            }
        }
    }
    Ok(chain)
}
