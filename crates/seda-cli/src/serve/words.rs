//! The settings of `seda serve` spelled as words (a leaf): [`Word`], which keeps a
//! parsed value with its spelling, and the few choices that exist only on the
//! command line and in the file ([`AdminListen`], [`HandoffArg`], [`DotfilesArg`],
//! [`TlsStageArg`]).

use std::net::SocketAddr;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::CliError;

/// A setting spelled as a word (`shared`, `codel`, `none`), kept with its spelling:
/// layers are merged as text, and an error quotes what was written.
#[derive(Clone, Debug, PartialEq)]
pub struct Word<T> {
    spelling: String,
    value: T,
}

impl<T: Copy> Word<T> {
    /// The parsed value.
    pub fn get(&self) -> T {
        self.value
    }
}

impl<T: FromStr<Err: Into<CliError>>> FromStr for Word<T> {
    type Err = CliError;

    fn from_str(s: &str) -> Result<Self, CliError> {
        Ok(Word {
            spelling: s.to_owned(),
            value: s.parse().map_err(Into::into)?,
        })
    }
}

impl<T> Serialize for Word<T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.spelling)
    }
}

impl<'de, T: FromStr<Err: Into<CliError>>> Deserialize<'de> for Word<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Where the admin listener goes: an address, or nowhere.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdminListen {
    /// Listen here.
    At(SocketAddr),
    /// No admin listener.
    None,
}

impl FromStr for AdminListen {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if s == "none" {
            return Ok(AdminListen::None);
        }
        s.parse().map(AdminListen::At).map_err(|_| {
            format!("admin-listen must be an address (e.g. 127.0.0.1:9090) or `none`, got `{s}`")
        })
    }
}

/// `handoff`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HandoffArg {
    /// Inline when the next queue is empty.
    Inline,
    /// Always through the queue.
    Queued,
}

impl FromStr for HandoffArg {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "inline" => Ok(HandoffArg::Inline),
            "queued" => Ok(HandoffArg::Queued),
            _ => Err(format!("handoff must be inline or queued, got `{s}`")),
        }
    }
}

/// `dotfiles`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DotfilesArg {
    /// 404 for them.
    Hide,
    /// Serve them.
    Serve,
}

impl FromStr for DotfilesArg {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "hide" => Ok(DotfilesArg::Hide),
            "serve" => Ok(DotfilesArg::Serve),
            _ => Err(format!("dotfiles must be hide or serve, got `{s}`")),
        }
    }
}

/// `tls-stage`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsStageArg {
    /// A pool of its own.
    Pool,
    /// Inline on the socket loops.
    Inline,
}

impl FromStr for TlsStageArg {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "pool" => Ok(TlsStageArg::Pool),
            "inline" => Ok(TlsStageArg::Inline),
            _ => Err(format!("tls-stage must be pool or inline, got `{s}`")),
        }
    }
}
