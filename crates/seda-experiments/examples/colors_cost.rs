//! One configuration of the cost-of-colors pipeline, for instruction counts that the
//! machine's load does not move:
//!
//! ```text
//! cargo build --release -p seda-experiments --example colors_cost
//! valgrind --tool=callgrind target/release/examples/colors_cost colors64 1 per-stage 100000
//! ```
//!
//! Arguments: kind (uncolored, colors64, one-color), stages, model (shared or
//! per-stage), events. Prints events per second (meaningless under callgrind).

use seda::ThreadModel;
use seda_experiments::colors::cost::{CostConfig, Kind, measure};

fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [kind, stages, model, events] = args.as_slice() else {
        return Err("usage: colors_cost KIND STAGES MODEL EVENTS".into());
    };
    let kind: Kind = kind.parse()?;
    let stages: usize = stages.parse().map_err(|e| format!("stages: {e}"))?;
    let model: ThreadModel = model.parse()?;
    let events: u64 = events.parse().map_err(|e| format!("events: {e}"))?;
    if stages == 0 {
        return Err("stages must be at least 1".into());
    }
    let cfg = CostConfig {
        events,
        ..CostConfig::default()
    };
    let per_s = measure(&cfg, stages, model, kind)?;
    println!("{per_s:.0} events/s");
    Ok(())
}
