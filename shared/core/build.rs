//! Build script of `swarm-core`: parses the timing table (`timings.toml`) with the table's own types and writes it as a Rust constant, so a table that does not parse, lacks a value or has one nobody reads fails the build.

#[allow(dead_code)] // the library uses the rest of the module
#[path = "src/timings/table.rs"]
mod table;

use std::error::Error;
use std::path::PathBuf;

use table::{Field, LINT_SECTIONS, Timings, positive_counts};

fn main() -> Result<(), Box<dyn Error>> {
    println!("cargo:rerun-if-changed=timings.toml");
    println!("cargo:rerun-if-changed=src/timings/table.rs");
    let dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let text = std::fs::read_to_string(dir.join("timings.toml"))?;
    let mut doc: toml::Table = toml::from_str(&text).map_err(|e| format!("timings.toml does not parse: {e}"))?;
    for section in LINT_SECTIONS {
        doc.remove(section);
    }
    let timings: Timings = toml::Value::Table(doc)
        .try_into()
        .map_err(|e| format!("timings.toml does not fit swarm_core::timings::Timings: {e}"))?;
    for (name, value) in positive_counts(&timings) {
        if value == 0 {
            return Err(format!("timings.toml: {name} must be at least 1").into());
        }
    }
    let out = PathBuf::from(std::env::var("OUT_DIR")?).join("standard_timings.rs");
    std::fs::write(out, timings.to_rust())?;
    Ok(())
}
