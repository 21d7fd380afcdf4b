//! A fixed-capacity sorted set of identifiers, for building the ID lists that the
//! spec requires in ascending order without allocating.

/// The smallest `N` distinct identifiers seen so far, kept sorted in a fixed array.
///
/// The lists must be ascending and duplicate-free; building them this way makes that
/// hold whatever order the caller's collection iterates in, without allocating.
pub(crate) struct SortedIds<const N: usize> {
    ids: [u32; N],
    len: usize,
    /// True once more than `N` distinct identifiers were offered.
    pub(crate) overflowed: bool,
}

impl<const N: usize> SortedIds<N> {
    pub(crate) fn new() -> Self {
        Self { ids: [0; N], len: 0, overflowed: false }
    }

    pub(crate) fn insert(&mut self, id: u32) {
        let position = match self.as_slice().binary_search(&id) {
            Ok(_) => return,
            Err(position) => position,
        };
        if self.len == N {
            self.overflowed = true;
            if position == N {
                return;
            }
            // Drop the largest to make room for a smaller one.
            self.len -= 1;
        }
        self.ids.copy_within(position..self.len, position + 1);
        // position <= len < N here (a full set dropped its largest entry above).
        if let Some(slot) = self.ids.get_mut(position) {
            *slot = id;
            self.len += 1;
        }
    }

    pub(crate) fn as_slice(&self) -> &[u32] {
        // len <= N always, so this is never the empty fallback.
        self.ids.get(..self.len).unwrap_or_default()
    }
}
