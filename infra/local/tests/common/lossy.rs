//! The lost-answer store decorator of the contract suites: the library's ([`swarm_local::platform::store_faults`], which the chaos run's store faults share), and a check that a call's answer was lost.

use anyhow::{Result, ensure};
use swarm_core::ports::StoreError;

#[allow(unused_imports)] // not every suite that shares `common` loses answers
pub use swarm_local::platform::store_faults::losing;

/// The error of a call whose answer was lost; an error when it answered.
pub fn answer_lost<T: std::fmt::Debug>(r: std::result::Result<T, StoreError>) -> Result<()> {
    ensure!(matches!(&r, Err(e) if e.is_transient()), "answer not lost: {r:?}");
    Ok(())
}
