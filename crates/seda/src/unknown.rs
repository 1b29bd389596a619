//! [`UnknownName`]: the error of every `FromStr` of a named setting in the workspace
//! (a thread model, an I/O backend, an admission policy, a log format): the setting,
//! the word given and the words it takes, so a user can correct the flag or key.
//! A leaf: it imports nothing of the crate.

/// A word that names none of a setting's values.
///
/// # Examples
///
/// ```
/// use seda::{ThreadModel, UnknownName};
///
/// let e: UnknownName = "pooled".parse::<ThreadModel>().unwrap_err();
/// assert_eq!(e.got(), "pooled");
/// assert_eq!(
///     e.to_string(),
///     "unknown thread model `pooled` (expected per-stage or shared)"
/// );
/// ```
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown {setting} `{got}` (expected {expected})")]
pub struct UnknownName {
    setting: &'static str,
    expected: String,
    got: String,
}

impl UnknownName {
    /// `got` names none of `setting`'s values; `expected` lists them for the user
    /// (e.g. `"per-stage or shared"`).
    pub fn new(setting: &'static str, expected: impl Into<String>, got: &str) -> Self {
        UnknownName {
            setting,
            expected: expected.into(),
            got: got.to_owned(),
        }
    }

    /// The setting, e.g. `"thread model"`.
    pub fn setting(&self) -> &'static str {
        self.setting
    }

    /// The values it takes, as the message lists them.
    pub fn expected(&self) -> &str {
        &self.expected
    }

    /// The word given.
    pub fn got(&self) -> &str {
        &self.got
    }
}
