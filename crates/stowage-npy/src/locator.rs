//! What a key index run's slot says of a key's latest record: the record's byte offset in
//! `records.log`, and a hint of where the key's first field lies.
//!
//! A lookup through a run makes three dependent reads of memory that is usually not in the CPU
//! cache: the run's slot, the log record it points to, then the row the record names. The hint
//! lets the row's load start as soon as the slot is read, beside the record's: the record still
//! decides what is read (a wrong hint only wastes a prefetch).
//!
//! ```text
//! payload (u64, 0: empty slot):
//!   index version 1, and version 2 without a hint:  offset + 1                      (bit 63 clear)
//!   index version 2 with a hint:   1 << 63 | hint << 39 | (offset + 1)  (offset + 1 < 2^39)
//!   hint (24 bits): file id * collection_size + row of the first field, where a file id is the
//!   collection file's position in `index/current`'s `uids`
//! ```
//!
//! A record past 512 GiB of log, or a row past 2^24 slots of the first field's files, has no hint.
//! stowage-npy readers before index version 2 would take a hinted payload for an offset, so
//! `index/current` says version 2 and they replay the log instead of using the runs.

/// Set on a payload that carries a hint.
const HINTED: u64 = 1 << 63;
/// The hint's lowest bit.
const HINT_SHIFT: u32 = 39;
/// The bits of `offset + 1` in a hinted payload.
const OFFSET_MASK: u64 = (1 << HINT_SHIFT) - 1;
/// Hints are below this.
const HINT_LIMIT: u64 = 1 << (63 - HINT_SHIFT);

/// A run slot's payload, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Locator {
    /// Byte offset of the key's latest record in `records.log`.
    pub offset: u64,
    /// Where the record's first field is, as the writer knew it.
    pub hint: Option<RowHint>,
}

/// The slot of a sample's first field: `file id * collection_size + row`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RowHint(u32);

impl RowHint {
    /// The hint of row `row` of file id `file`, whose files hold `collection_size` rows; `None`
    /// when it does not fit in a hint's 24 bits.
    pub fn of(file: u32, row: u32, collection_size: usize) -> Option<RowHint> {
        let at = u64::from(file)
            .checked_mul(collection_size as u64)?
            .checked_add(u64::from(row))
            .filter(|&at| at < HINT_LIMIT && u64::from(row) < collection_size as u64)?;
        Some(RowHint(at as u32))
    }

    /// (file id, row) of the hint, for files of `collection_size` rows.
    pub fn file_and_row(self, collection_size: usize) -> (usize, usize) {
        let at = self.0 as usize;
        let size = collection_size.max(1);
        (at / size, at % size)
    }
}

impl Locator {
    /// The payload of the record at `offset`, with `hint` when both fit.
    pub fn encode(offset: u64, hint: Option<RowHint>) -> u64 {
        match hint {
            Some(RowHint(hint)) if offset < OFFSET_MASK => {
                HINTED | u64::from(hint) << HINT_SHIFT | (offset + 1)
            }
            _ => offset + 1,
        }
    }

    /// The locator of a non-zero payload (either index version). A damaged payload whose offset
    /// bits are zero wraps to an offset no log reaches, never panics.
    pub fn decode(payload: u64) -> Locator {
        if payload & HINTED == 0 {
            return Locator { offset: payload.wrapping_sub(1), hint: None };
        }
        Locator {
            offset: (payload & OFFSET_MASK).wrapping_sub(1),
            hint: Some(RowHint(((payload & !HINTED) >> HINT_SHIFT) as u32)),
        }
    }

    /// The record offset of a non-zero payload.
    pub fn offset_of(payload: u64) -> u64 {
        Locator::decode(payload).offset
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hinted_payload_decodes_to_its_offset_and_hint() {
        for offset in [0, 8, 1_000, OFFSET_MASK - 1] {
            for (file, row) in [(0, 0), (3, 7), (1_048_575, 15)] {
                let hint = RowHint::of(file, row, 16).unwrap();
                let payload = Locator::encode(offset, Some(hint));
                assert_ne!(payload, 0, "0 is an empty slot");
                assert_eq!(Locator::decode(payload), Locator { offset, hint: Some(hint) });
                assert_eq!(hint.file_and_row(16), (file as usize, row as usize));
            }
        }
    }

    #[test]
    fn version_1_payloads_and_unfit_hints_decode_as_plain_offsets() {
        // Version 1 wrote offset + 1 for every record, however far into the log.
        for offset in [0, 8, OFFSET_MASK, 1 << 50] {
            assert_eq!(Locator::decode(offset + 1), Locator { offset, hint: None });
        }
        // A record too far into the log for a hint keeps its whole offset.
        let hint = RowHint::of(1, 1, 16);
        assert_eq!(Locator::decode(Locator::encode(OFFSET_MASK, hint)).hint, None);
        assert_eq!(Locator::offset_of(Locator::encode(OFFSET_MASK + 5, hint)), OFFSET_MASK + 5);
        // Rows beyond 2^24 slots, or outside their file, have none.
        assert_eq!(RowHint::of(1 << 20, 0, 16), None);
        assert_eq!(RowHint::of(0, 16, 16), None);
        assert_eq!(RowHint::of(u32::MAX, 0, usize::MAX), None);
        assert!(RowHint::of((1 << 20) - 1, 15, 16).is_some());
    }

    #[test]
    fn a_damaged_payload_decodes_to_an_offset_past_any_log() {
        assert_eq!(Locator::decode(HINTED).offset, u64::MAX);
        assert_eq!(Locator::decode(HINTED | 5 << HINT_SHIFT).offset, u64::MAX);
        assert_eq!(Locator::decode(0).offset, u64::MAX);
    }
}
