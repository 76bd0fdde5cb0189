//! A request's fate: which injected fault it gets, if any — drawn per request from one seeded RNG, or spaced per kind ([`Faults::spaced`]) — and how long the mock waits before answering.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::config::{Faults, Latency};

/// What a request gets.
pub(crate) enum Fate {
    Normal,
    RateLimit,
    ServerError { html: bool },
    Hang,
    Malformed,
    Truncated,
}

/// The fate of request `seq` (from 0); truncation only in agent mode (`agent`).
pub(crate) fn draw(
    rng: &mut StdRng,
    spacing: &mut [(StdRng, f64, f64)],
    faults: &Faults,
    seq: u64,
    agent: bool,
) -> Fate {
    if faults.spaced {
        return match spaced_fate(spacing, seq + 1, agent) {
            Some(0) => Fate::RateLimit,
            Some(1) => Fate::ServerError { html: rng.random_bool(0.5) },
            Some(2) => Fate::Hang,
            Some(3) => Fate::Malformed,
            Some(_) => Fate::Truncated,
            None => Fate::Normal,
        };
    }
    let u: f64 = rng.random();
    let rate_limit = faults.rate_limit;
    let server_error = rate_limit + faults.server_error;
    let hang = server_error + faults.hang;
    let malformed = hang + faults.malformed;
    let truncated = malformed + faults.truncated;
    if u < rate_limit {
        Fate::RateLimit
    } else if u < server_error {
        Fate::ServerError { html: rng.random_bool(0.5) }
    } else if u < hang {
        Fate::Hang
    } else if u < malformed {
        Fate::Malformed
    } else if u < truncated && agent {
        Fate::Truncated
    } else {
        Fate::Normal
    }
}

/// The wait before answering.
pub(crate) fn delay(rng: &mut StdRng, latency: Latency) -> Duration {
    match latency {
        Latency::None => Duration::ZERO,
        Latency::Fixed(d) => d,
        Latency::Uniform { min, max } if max > min => {
            Duration::from_micros(rng.random_range(min.as_micros() as u64..=max.as_micros() as u64))
        }
        Latency::Uniform { min, .. } => min,
    }
}

/// The spaced streams of the five fault kinds, in [`spaced_fate`]'s order.
pub(crate) fn spacing(f: &Faults, seed: u64) -> Vec<(StdRng, f64, f64)> {
    [f.rate_limit, f.server_error, f.hang, f.malformed, f.truncated]
        .iter()
        .enumerate()
        .map(|(i, rate)| {
            let mut rng = StdRng::seed_from_u64(seed ^ (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
            if *rate <= 0.0 {
                return (rng, f64::INFINITY, f64::INFINITY);
            }
            let gap = 1.0 / rate.min(1.0);
            let first = 1.0 + rng.random::<f64>() * (gap - 1.0);
            (rng, gap, first)
        })
        .collect()
}

/// With [`Faults::spaced`]: the kind (index into [`spacing`]) request number `n` (from 1) gets,
/// if one is due; truncation only in agent mode.
fn spaced_fate(spacing: &mut [(StdRng, f64, f64)], n: u64, agent: bool) -> Option<usize> {
    let n = n as f64;
    let kind = spacing.iter().enumerate().position(|(i, (_, _, due))| *due <= n && (i < 4 || agent))?;
    let (rng, gap, due) = &mut spacing[kind];
    let jitter = (0.5f64).min((*gap - 1.0) / *gap);
    while *due <= n {
        *due += *gap * rng.random_range(1.0 - jitter..=1.0 + jitter);
    }
    Some(kind)
}
