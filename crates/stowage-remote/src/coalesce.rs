//! Merging the byte ranges of one object into fewer requests, and cutting the answers back.
//!
//! object_store has a helper for this, but it slices its buffers without checking that a body
//! came back whole, so a short body panics inside it. Here every fetched part is checked before
//! it is cut, and the caller decides how many requests are in flight.

use std::ops::Range;

use stowage_core::bytes::Bytes;

/// The requests that fetch `ranges`: each range lies inside one of them, and ranges at most `gap`
/// bytes apart share one. The result is sorted and its ranges do not overlap.
///
/// ```
/// use stowage_remote::coalesce::merge;
/// assert_eq!(merge(&[10..20, 0..5, 25..30, 100..110], 5), [0..30, 100..110]);
/// assert_eq!(merge(&[10..20, 0..5, 25..30, 100..110], 4), [0..5, 10..20, 25..30, 100..110]);
/// ```
pub fn merge(ranges: &[Range<u64>], gap: u64) -> Vec<Range<u64>> {
    let mut sorted: Vec<Range<u64>> = ranges.to_vec();
    sorted.sort_by_key(|r| (r.start, r.end));
    let mut merged: Vec<Range<u64>> = Vec::with_capacity(sorted.len());
    for range in sorted {
        match merged.last_mut() {
            Some(last) if range.start <= last.end.saturating_add(gap) => {
                last.end = last.end.max(range.end);
            }
            _ => merged.push(range),
        }
    }
    merged
}

/// Cuts each of `ranges` out of the `fetched` parts (`parts[i]` holds the bytes of
/// `fetched[i]`, as [`merge`] made them); `None` when a part is too short to hold a range (the
/// caller fetched it again or reports it), never a panic.
///
/// ```
/// use stowage_core::bytes::Bytes;
/// use stowage_remote::coalesce::{cut, merge};
/// let ranges = [2..4, 6..8];
/// let fetched = merge(&ranges, 10);
/// let parts = [Bytes::from_static(b"23456789")]; // bytes 2..10 of "0123456789"
/// assert_eq!(fetched, [2..8]);
/// let cut_parts = cut(&ranges, &fetched, &parts).unwrap();
/// assert_eq!(cut_parts, [Bytes::from_static(b"23"), Bytes::from_static(b"67")]);
/// assert_eq!(cut(&ranges, &fetched, &[Bytes::from_static(b"2345")]), None);
/// ```
pub fn cut(ranges: &[Range<u64>], fetched: &[Range<u64>], parts: &[Bytes]) -> Option<Vec<Bytes>> {
    if parts.len() != fetched.len() {
        return None;
    }
    ranges
        .iter()
        .map(|range| {
            // The fetched range that starts at or before this one: merge() put it inside it.
            let at = fetched.partition_point(|f| f.start <= range.start).checked_sub(1)?;
            let (holder, part) = (&fetched[at], &parts[at]);
            if range.end > holder.end || (part.len() as u64) < holder.end - holder.start {
                return None;
            }
            let start = usize::try_from(range.start - holder.start).ok()?;
            let end = usize::try_from(range.end - holder.start).ok()?;
            Some(part.slice(start..end))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_range_is_cut_from_its_merged_part_exactly() {
        let object: Vec<u8> = (0..=255u8).cycle().take(5_000).collect();
        let ranges = [4000..4100, 0..1, 10..20, 15..30, 2999..3000, 4050..4060, 0..5000];
        for gap in [0, 5, 1_000, 10_000] {
            let fetched = merge(&ranges, gap);
            assert!(fetched.windows(2).all(|w| w[0].end < w[1].start), "{gap}: {fetched:?}");
            let parts: Vec<Bytes> = fetched
                .iter()
                .map(|f| Bytes::copy_from_slice(&object[f.start as usize..f.end as usize]))
                .collect();
            let cut_parts = cut(&ranges, &fetched, &parts).unwrap();
            for (range, part) in ranges.iter().zip(&cut_parts) {
                assert_eq!(part.as_ref(), &object[range.start as usize..range.end as usize]);
            }
        }
    }

    #[test]
    fn a_short_or_missing_part_is_none_not_a_panic() {
        let ranges = [0..10, 100..110];
        let fetched = merge(&ranges, 0);
        let whole = [Bytes::from(vec![0u8; 10]), Bytes::from(vec![0u8; 10])];
        assert!(cut(&ranges, &fetched, &whole).is_some());
        for short in 0..10 {
            let parts = [Bytes::from(vec![0u8; 10]), Bytes::from(vec![0u8; short])];
            assert_eq!(cut(&ranges, &fetched, &parts), None, "{short}");
        }
        assert_eq!(cut(&ranges, &fetched, &whole[..1]), None);
        // A range that no fetched range holds.
        let outside = vec![200..210, 0..10];
        assert_eq!(cut(&outside, &fetched, &whole), None);
    }
}
