//! Last writer wins by Kafka key, ordered by (partition, offset), never by arrival order.

use std::collections::HashMap;

use arrow::array::{Array, BinaryArray, BooleanArray};

/// For the rows of `entries` in order, whether each is the last one for its key. Rows without a
/// key are always kept. Deterministic: replaying the same records gives the same rows.
pub(crate) fn last_per_key<'a>(
    entries: impl Iterator<Item = (i32, &'a [i64], Option<&'a BinaryArray>)> + Clone,
) -> BooleanArray {
    let mut winner: HashMap<&'a [u8], (i32, i64, usize)> = HashMap::new();
    let mut total = 0;
    for (partition, offsets, keys) in entries.clone() {
        for (row, &offset) in offsets.iter().enumerate() {
            let global = total + row;
            if let Some(key) = keys.filter(|k| k.is_valid(row)).map(|k| k.value(row)) {
                let candidate = (partition, offset, global);
                winner
                    .entry(key)
                    .and_modify(|best| {
                        if (candidate.0, candidate.1) > (best.0, best.1) {
                            *best = candidate;
                        }
                    })
                    .or_insert(candidate);
            }
        }
        total += offsets.len();
    }
    let mut keep = vec![true; total];
    let mut base = 0;
    for (_, offsets, keys) in entries {
        if let Some(keys) = keys {
            for row in 0..offsets.len() {
                if keys.is_valid(row) {
                    keep[base + row] = winner[keys.value(row)].2 == base + row;
                }
            }
        }
        base += offsets.len();
    }
    BooleanArray::from(keep)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_highest_partition_offset_per_key_whatever_the_arrival_order() {
        let a = BinaryArray::from(vec![Some(&b"k1"[..]), Some(b"k2"), None]);
        let b = BinaryArray::from(vec![Some(&b"k1"[..]), Some(b"k2")]);
        // entry 1: partition 0 offsets 10..12; entry 2 arrived later but holds older offsets
        let entries = [(0, &[10_i64, 11, 12][..], Some(&a)), (0, &[3_i64, 20][..], Some(&b))];
        let keep = last_per_key(entries.iter().copied());
        assert_eq!(keep.values().iter().collect::<Vec<_>>(), vec![true, false, true, false, true]);
    }
}
