//! The error a controller configuration fails validation with, and the check
//! that builds it: a leaf that the controllers and policies import.

/// A controller configuration that fails validation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError(String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

pub(crate) fn check(ok: bool, msg: impl FnOnce() -> String) -> Result<(), ConfigError> {
    if ok { Ok(()) } else { Err(ConfigError(msg())) }
}
