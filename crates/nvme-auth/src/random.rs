//! Where challenges, sequence numbers and Diffie-Hellman private keys come from.
//! The state machines take a [`RandomSource`] so tests can replay an exchange; in
//! production it is [`OsRandom`] (the kernel's generator, `getrandom(2)`).

use sha2::{Digest as _, Sha256};

/// The random number generator failed: no challenge can be made safely.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the random number generator failed")]
pub struct RandomError;

/// A source of random bytes.
pub trait RandomSource: Send {
    /// Fills `out` with random bytes.
    fn fill(&mut self, out: &mut [u8]) -> Result<(), RandomError>;

    /// A random u32 that is not zero (sequence numbers: 0 means "none").
    fn nonzero_u32(&mut self) -> Result<u32, RandomError> {
        loop {
            let mut raw = [0u8; 4];
            self.fill(&mut raw)?;
            let value = u32::from_le_bytes(raw);
            if value != 0 {
                return Ok(value);
            }
        }
    }
}

/// The operating system's cryptographic generator.
#[derive(Clone, Copy, Debug, Default)]
pub struct OsRandom;

impl RandomSource for OsRandom {
    fn fill(&mut self, out: &mut [u8]) -> Result<(), RandomError> {
        getrandom::fill(out).map_err(|_| RandomError)
    }
}

/// A deterministic generator (SHA-256 of a seed and a counter) for tests and
/// reproducible simulations. Never use it for real authentication: anyone who knows
/// the seed knows every challenge and private key.
#[derive(Clone, Debug)]
pub struct SeededRandom {
    seed: u64,
    counter: u64,
}

impl SeededRandom {
    /// A generator replaying the stream of `seed`.
    pub fn new(seed: u64) -> Self {
        SeededRandom { seed, counter: 0 }
    }
}

impl RandomSource for SeededRandom {
    fn fill(&mut self, out: &mut [u8]) -> Result<(), RandomError> {
        for chunk in out.chunks_mut(32) {
            let mut hasher = Sha256::new();
            hasher.update(self.seed.to_le_bytes());
            hasher.update(self.counter.to_le_bytes());
            self.counter += 1;
            let block = hasher.finalize();
            chunk.copy_from_slice(&block[..chunk.len()]);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_streams_replay_and_differ_by_seed() {
        let (mut a, mut b, mut c) = (SeededRandom::new(1), SeededRandom::new(1), SeededRandom::new(2));
        let (mut x, mut y, mut z) = ([0u8; 70], [0u8; 70], [0u8; 70]);
        a.fill(&mut x).unwrap();
        b.fill(&mut y).unwrap();
        c.fill(&mut z).unwrap();
        assert_eq!(x, y);
        assert_ne!(x, z);
        assert_ne!(OsRandom.nonzero_u32().unwrap(), 0);
    }
}
