//! The tables that exist only in `seda serve`'s TOML file (a leaf): `[response-time]`,
//! `[classes]`, `[[handler]]`, `[[route]]`, `[gradient]`, `[aimd]`, as read;
//! [`ServeConfig::validate`](super::config::ServeConfig::validate) checks them.

use serde::{Deserialize, Serialize};

/// `[response-time]` of the TOML file: the USITS'03 controller's parameters.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct FileResponseTime {
    pub(super) nreq: Option<usize>,
    pub(super) timeout_ms: Option<f64>,
    pub(super) alpha: Option<f64>,
    pub(super) err_d: Option<f64>,
    pub(super) err_i: Option<f64>,
    pub(super) adj_i: Option<f64>,
    pub(super) adj_d: Option<f64>,
    pub(super) c_i: Option<f64>,
    pub(super) rate_min: Option<f64>,
    pub(super) rate_max: Option<f64>,
    pub(super) initial_rate: Option<f64>,
    pub(super) bucket_depth: Option<f64>,
    pub(super) burst_ms: Option<f64>,
}

/// `[classes]` of the TOML file.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct FileClasses {
    pub(super) header: Option<String>,
    pub(super) cookie: Option<String>,
    #[serde(default)]
    pub(super) prefixes: Vec<FilePrefix>,
}

/// One entry of `[classes] prefixes`.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct FilePrefix {
    pub(super) prefix: String,
    pub(super) class: u8,
}

/// One `[[handler]]` of the TOML file.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct FileHandler {
    pub(super) name: String,
    pub(super) rt_target_ms: Option<f64>,
    #[serde(default)]
    pub(super) class_targets_ms: Vec<f64>,
}

/// One `[[route]]` of the TOML file.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct FileRoute {
    pub(super) prefix: String,
    pub(super) upstreams: Vec<String>,
    pub(super) rt_target_ms: Option<f64>,
    pub(super) class_header: Option<String>,
    pub(super) max_body_kb: Option<u64>,
    pub(super) timeout_ms: Option<f64>,
}

/// `[gradient]` of the TOML file.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct FileGradient {
    pub(super) initial: Option<f64>,
    pub(super) min: Option<f64>,
    pub(super) max: Option<f64>,
    pub(super) tolerance: Option<f64>,
    pub(super) smoothing: Option<f64>,
    pub(super) long_window: Option<f64>,
    pub(super) window_ms: Option<f64>,
}

/// `[aimd]` of the TOML file.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct FileAimd {
    pub(super) initial: Option<f64>,
    pub(super) min: Option<f64>,
    pub(super) max: Option<f64>,
    pub(super) backoff: Option<f64>,
    pub(super) timeout_ms: Option<f64>,
}
