//! Connection slots: a Vec of entries with a free list and a generation per
//! slot, so a completion that names (index, generation) of a connection that
//! is gone never reaches the connection that reused the slot.

use crate::user_data::GENERATION_MASK;

struct Entry<T> {
    generation: u32,
    value: Option<T>,
}

pub struct Slab<T> {
    entries: Vec<Entry<T>>,
    free: Vec<u32>,
    occupied: usize,
}

impl<T> Slab<T> {
    pub fn new() -> Slab<T> {
        Slab { entries: Vec::new(), free: Vec::new(), occupied: 0 }
    }

    /// Stores `value`, returning its (index, generation).
    pub fn insert(&mut self, value: T) -> (u32, u32) {
        self.occupied += 1;
        if let Some(index) = self.free.pop() {
            let entry = &mut self.entries[index as usize];
            entry.value = Some(value);
            return (index, entry.generation);
        }
        let index = u32::try_from(self.entries.len()).expect("more than u32::MAX connections on one thread");
        self.entries.push(Entry { generation: 0, value: Some(value) });
        (index, 0)
    }

    /// The value at `index` if its generation still matches.
    pub fn get_mut(&mut self, index: u32, generation: u32) -> Option<&mut T> {
        let entry = self.entries.get_mut(index as usize)?;
        if entry.generation != generation {
            return None;
        }
        entry.value.as_mut()
    }

    /// The value at `index`, whatever its generation (for scans over indices).
    pub fn get_mut_at(&mut self, index: u32) -> Option<(&mut T, u32)> {
        let entry = self.entries.get_mut(index as usize)?;
        let generation = entry.generation;
        entry.value.as_mut().map(|value| (value, generation))
    }

    /// Removes the value and bumps the slot's generation so stale references
    /// to it stop matching.
    pub fn remove(&mut self, index: u32) -> Option<T> {
        let entry = self.entries.get_mut(index as usize)?;
        let value = entry.value.take()?;
        entry.generation = (entry.generation + 1) & GENERATION_MASK;
        self.free.push(index);
        self.occupied -= 1;
        Some(value)
    }

    /// The index the next `insert` will use.
    pub fn next_index(&self) -> u32 {
        self.free.last().copied().unwrap_or(self.entries.len() as u32)
    }

    /// One past the largest index ever used: scans run over `0..index_bound()`.
    pub fn index_bound(&self) -> u32 {
        self.entries.len() as u32
    }

    pub fn len(&self) -> usize {
        self.occupied
    }

    pub fn is_empty(&self) -> bool {
        self.occupied == 0
    }

    /// Every value, for the abnormal exit path that must leak rather than drop.
    pub fn into_values(self) -> impl Iterator<Item = T> {
        self.entries.into_iter().filter_map(|entry| entry.value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reused_slot_rejects_old_generation() {
        let mut slab = Slab::new();
        let (index, generation) = slab.insert("first");
        assert_eq!(slab.remove(index), Some("first"));
        let (reused, new_generation) = slab.insert("second");
        assert_eq!(reused, index);
        assert_ne!(new_generation, generation);
        assert!(slab.get_mut(index, generation).is_none());
        assert_eq!(slab.get_mut(index, new_generation).copied(), Some("second"));
        assert_eq!(slab.len(), 1);
        assert_eq!(slab.remove(index), Some("second"));
        assert_eq!(slab.remove(index), None);
        assert!(slab.is_empty());
    }
}
