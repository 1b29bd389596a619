//! Load schedules: a sequence of phases, each a duration at a level (users in a closed
//! loop, requests per second in an open loop). Text form: `60s@3,60s@1000,60s@3`;
//! durations take `ms`, `s` or `m`.

use std::time::Duration;

use serde::Serialize;

use crate::error::LoadError;

/// One phase. `#[non_exhaustive]`: make one with [`Phase::new`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Phase {
    /// How long the phase lasts.
    #[serde(serialize_with = "ser_secs")]
    pub duration: Duration,
    /// Users (closed loop) or requests per second (open loop).
    pub level: f64,
}

impl Phase {
    /// A phase of `duration` at `level` (users in a closed loop, requests per second
    /// in an open loop).
    pub fn new(duration: Duration, level: f64) -> Self {
        Phase { duration, level }
    }
}

fn ser_secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// A load schedule: phases run back to back.
///
/// A schedule with no phases, a level that is negative or not finite, or no duration
/// at all is refused with a [`LoadError`] when a load starts with it (and by
/// [`Schedule::parse`] at once).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use seda_load::{Phase, Schedule};
///
/// let spike = Schedule::new(vec![
///     Phase::new(Duration::from_secs(60), 3.0),
///     Phase::new(Duration::from_secs(60), 1000.0),
///     Phase::new(Duration::from_secs(60), 3.0),
/// ]);
/// assert_eq!(spike, Schedule::parse("60s@3,60s@1000,60s@3").unwrap());
/// assert_eq!(spike.total(), Duration::from_secs(180));
/// assert_eq!(spike.phases()[1].level, 1000.0);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Schedule {
    /// The phases, in order.
    phases: Vec<Phase>,
}

impl Schedule {
    /// The phases `phases`, run back to back in order.
    pub fn new(phases: Vec<Phase>) -> Self {
        Schedule { phases }
    }

    /// One phase.
    pub fn steady(duration: Duration, level: f64) -> Self {
        Schedule::new(vec![Phase::new(duration, level)])
    }

    /// The phases, in order.
    pub fn phases(&self) -> &[Phase] {
        &self.phases
    }

    /// Why a load cannot run this schedule: no phases, a level that is negative or
    /// not finite, or no duration at all.
    pub fn check(&self) -> Result<(), LoadError> {
        if self.phases.is_empty() {
            return Err(LoadError::config("the schedule has no phases"));
        }
        if let Some(p) = self
            .phases
            .iter()
            .find(|p| !p.level.is_finite() || p.level < 0.0)
        {
            return Err(LoadError::config(format!(
                "schedule level {} must be a number >= 0",
                p.level
            )));
        }
        if self.total().is_zero() {
            return Err(LoadError::config("the schedule has no duration"));
        }
        Ok(())
    }

    /// Parse `DUR@LEVEL[,DUR@LEVEL...]`.
    pub fn parse(text: &str) -> Result<Self, LoadError> {
        let mut phases = Vec::new();
        for part in text.split(',') {
            let part = part.trim();
            let (d, l) = part.split_once('@').ok_or_else(|| {
                LoadError::parse(format!(
                    "schedule phase {part:?} is not DURATION@LEVEL (e.g. 60s@100)"
                ))
            })?;
            let duration = parse_duration(d)?;
            let level: f64 = l
                .trim()
                .parse()
                .map_err(|_| LoadError::parse(format!("schedule level {l:?} is not a number")))?;
            if !level.is_finite() || level < 0.0 {
                return Err(LoadError::parse(format!(
                    "schedule level {l:?} must be >= 0"
                )));
            }
            phases.push(Phase::new(duration, level));
        }
        if phases.iter().all(|p| p.duration.is_zero()) {
            return Err(LoadError::parse("schedule has no duration"));
        }
        Ok(Schedule::new(phases))
    }

    /// Total duration.
    pub fn total(&self) -> Duration {
        self.phases.iter().map(|p| p.duration).sum()
    }

    /// Largest level of any phase.
    pub fn max_level(&self) -> f64 {
        self.phases.iter().map(|p| p.level).fold(0.0, f64::max)
    }

    /// Index of the phase at offset `t` from the start (`None` past the end).
    pub fn phase_at(&self, t: Duration) -> Option<usize> {
        let mut end = Duration::ZERO;
        for (i, p) in self.phases.iter().enumerate() {
            end += p.duration;
            if t < end {
                return Some(i);
            }
        }
        None
    }

    /// Level at offset `t` (0 past the end).
    pub fn level_at(&self, t: Duration) -> f64 {
        self.phase_at(t).map_or(0.0, |i| self.phases[i].level)
    }

    /// Offset at which phase `i` ends.
    pub fn phase_end(&self, i: usize) -> Duration {
        self.phases.iter().take(i + 1).map(|p| p.duration).sum()
    }
}

/// Parse a duration as [`humantime`] writes it (`250ms`, `30s`, `2m`, `1h30m`) or a
/// bare number of seconds (`0.5`); at most 10^7 s.
pub fn parse_duration(text: &str) -> Result<Duration, LoadError> {
    let t = text.trim();
    let bad = |why: &dyn std::fmt::Display| {
        LoadError::parse(format!(
            "duration {text:?} is not like 250ms, 30s, 2m or 1h30m: {why}"
        ))
    };
    let d = match t.parse::<f64>() {
        Ok(v) if (0.0..=1e7).contains(&v) => Duration::from_secs_f64(v),
        Ok(_) => return Err(bad(&"a number of seconds from 0 to 10^7")),
        Err(_) => humantime::parse_duration(t).map_err(|e| bad(&e))?,
    };
    if d > Duration::from_secs(10_000_000) {
        return Err(bad(&"longer than 10^7 s"));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_spike() {
        let s = Schedule::parse("60s@3, 500ms@1000,1m@3").unwrap();
        assert_eq!(s.phases.len(), 3);
        assert_eq!(s.total(), Duration::from_millis(120_500));
        assert_eq!(s.level_at(Duration::from_secs(59)), 3.0);
        assert_eq!(s.level_at(Duration::from_millis(60_100)), 1000.0);
        assert_eq!(s.level_at(Duration::from_secs(61)), 3.0);
        assert_eq!(s.phase_at(Duration::from_secs(121)), None);
        assert_eq!(s.max_level(), 1000.0);
        assert_eq!(s.phase_end(1), Duration::from_millis(60_500));
    }

    #[test]
    fn rejects_bad_text() {
        for bad in [
            "", "60s", "x@3", "60s@-1", "60s@abc", "0s@3", "5x@1", "1e8@1", "-1@1",
        ] {
            assert!(Schedule::parse(bad).is_err(), "{bad}");
        }
    }

    /// A schedule built from phases is refused before a load runs it when it has no
    /// phases, a bad level or no duration; the parser's schedules pass.
    #[test]
    fn check_refuses_what_cannot_run() {
        let s = |phases: &[(u64, f64)]| {
            Schedule::new(
                phases
                    .iter()
                    .map(|&(ms, l)| Phase::new(Duration::from_millis(ms), l))
                    .collect(),
            )
        };
        for (bad, why) in [
            (s(&[]), "no phases"),
            (s(&[(1000, -1.0)]), ">= 0"),
            (s(&[(1000, f64::NAN)]), ">= 0"),
            (s(&[(1000, f64::INFINITY)]), ">= 0"),
            (s(&[(0, 3.0), (0, 5.0)]), "no duration"),
        ] {
            let err = bad.check().expect_err(why).to_string();
            assert!(err.contains(why), "{err:?} should say {why:?}");
        }
        s(&[(0, 3.0), (1000, 0.0)]).check().unwrap();
        Schedule::parse("60s@3,500ms@1000")
            .unwrap()
            .check()
            .unwrap();
    }

    #[test]
    fn durations_as_humantime_writes_them_or_bare_seconds() {
        let ok = [
            ("250ms", 250),
            ("30s", 30_000),
            ("2m", 120_000),
            ("1h30m", 5_400_000),
            ("1m 30s", 90_000),
            ("0.5", 500),
            (" 7 ", 7_000),
        ];
        for (text, ms) in ok {
            assert_eq!(
                parse_duration(text).unwrap(),
                Duration::from_millis(ms),
                "{text}"
            );
        }
        for bad in ["", "ms", "-2s", "1.5.s", "200 years", "nan"] {
            let e = parse_duration(bad).unwrap_err().to_string();
            assert!(e.contains(&format!("{bad:?}")), "{e}");
        }
    }
}
