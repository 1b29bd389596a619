//! The stage graph, as observed at run time, exported as Graphviz DOT.
//!
//! Edges are recorded when a handler enqueues to another stage, so the graph shows
//! what the service really does, not what it was configured to do.

use std::fmt::Write as _;

use super::RuntimeSnapshot;

impl RuntimeSnapshot {
    /// The stage graph as Graphviz DOT: one node per stage labelled with its queue
    /// length and processed count, one edge per observed enqueue path.
    pub fn to_dot(&self) -> String {
        let mut out = String::from("digraph seda {\n  rankdir=LR;\n  node [shape=box];\n");
        for s in &self.stages {
            let _ = writeln!(
                out,
                "  \"{}\" [label=\"{}\\nqueue {} / processed {}\"];",
                escape(&s.name),
                escape(&s.name),
                s.queue_len,
                s.processed
            );
        }
        for (from, to) in &self.edges {
            let _ = writeln!(out, "  \"{}\" -> \"{}\";", escape(from), escape(to));
        }
        out.push_str("}\n");
        out
    }

    /// The stage graph alone as JSON: `{"stages":[..names..],"edges":[[from,to],..]}`.
    pub fn graph_json(&self) -> String {
        let names: Vec<&str> = self.stages.iter().map(|s| s.name.as_str()).collect();
        serde_json::json!({ "stages": names, "edges": self.edges }).to_string()
    }
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}
