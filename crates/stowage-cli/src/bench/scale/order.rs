//! The random read order of the scale suite: indices drawn uniformly **with replacement** from a
//! seeded generator, one at a time. Nothing the size of the cache is held (no shuffled list of
//! 100 million indices); the same seed gives the same order to every backend and reference.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Row indices in `0..rows`, uniform with replacement, from a seed; unbounded until
/// [`Sampler::take_n`] bounds it.
#[derive(Debug, Clone)]
pub struct Sampler {
    rng: StdRng,
    rows: usize,
    left: usize,
}

impl Sampler {
    /// An unbounded order over `0..rows` (empty when `rows` is 0).
    pub fn new(seed: u64, rows: usize) -> Sampler {
        Sampler { rng: StdRng::seed_from_u64(seed), rows, left: usize::MAX }
    }

    /// The same order, ending after `count` indices.
    pub fn take_n(self, count: usize) -> Sampler {
        Sampler { left: count, ..self }
    }
}

impl Iterator for Sampler {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        if self.left == 0 || self.rows == 0 {
            return None;
        }
        self.left -= 1;
        Some(self.rng.random_range(0..self.rows))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = if self.rows == 0 { 0 } else { self.left };
        (left, Some(left))
    }
}

impl ExactSizeIterator for Sampler {}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same seed repeats the order, another seed changes it, every index is in range and
    /// (with replacement, over many draws) every row is drawn.
    #[test]
    fn orders_repeat_stay_in_range_and_cover_the_rows() {
        let a: Vec<usize> = Sampler::new(7, 100).take_n(5_000).collect();
        let b: Vec<usize> = Sampler::new(7, 100).take_n(5_000).collect();
        let c: Vec<usize> = Sampler::new(8, 100).take_n(5_000).collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(a.len(), 5_000);
        assert!(a.iter().all(|&i| i < 100));
        let mut seen = [false; 100];
        a.iter().for_each(|&i| seen[i] = true);
        assert!(seen.iter().all(|&s| s));
        assert_eq!(Sampler::new(1, 0).take_n(10).count(), 0);
        assert_eq!(Sampler::new(1, 10).take_n(10).len(), 10);
    }
}
