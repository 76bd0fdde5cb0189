//! Benchmark placeholder (filled in later).
fn main() {}
