//! The verdict's table as the checks write it: one row per measure, and what each check found — a broken guarantee, or a fault kind the run was too small to inject — with the small formatting helpers the rows share.

use std::fmt::Write as _;
use std::time::Duration;

/// What one check found besides its rows.
pub(super) enum Finding {
    /// A guarantee broke.
    Broken(String),
    /// A fault kind was never injected: the run says nothing about it.
    TooSmall(String),
}

/// The table being written, and what the checks found.
pub(super) struct Sheet {
    pub(super) table: String,
    pub(super) findings: Vec<Finding>,
    /// Rates sized for this run, for the kinds it was too small for.
    pub(super) sizing: Vec<String>,
    /// Kinds no rate can inject at this size (they met no opportunity).
    pub(super) out_of_reach: Vec<String>,
}

impl Sheet {
    pub(super) fn row(&mut self, name: &str, value: impl std::fmt::Display) {
        let _ = writeln!(self.table, "| {name:<58} | {:<62} |", value.to_string());
    }

    pub(super) fn broken(&mut self, text: String) {
        self.findings.push(Finding::Broken(text));
    }
}

pub(super) fn percentile(sorted: &[Duration], p: f64) -> Option<Duration> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[rank - 1])
}

pub(super) fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

/// `"none"` for an empty tally, else the tally.
pub(super) fn or_none(tally: String) -> String {
    if tally.is_empty() { "none".into() } else { tally }
}

/// `"0"` for no items, else how many and which.
pub(super) fn count_and_list(items: &[String]) -> String {
    if items.is_empty() { "0".into() } else { format!("{} ({})", items.len(), shorten(items)) }
}

/// At most 5 items, then how many more.
pub(super) fn shorten(items: &[String]) -> String {
    let mut out = items.iter().take(5).cloned().collect::<Vec<_>>().join(", ");
    if items.len() > 5 {
        let _ = write!(out, " … and {} more", items.len() - 5);
    }
    out
}
