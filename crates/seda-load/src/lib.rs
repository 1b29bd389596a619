//! Load generation and experiments for SEDA (issue 4).
