//! Experiments: servers under test, load series, tables and charts.
