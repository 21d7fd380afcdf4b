//! Command slots: one per submission queue entry the host may have outstanding,
//! allocated when the queue connects. The slot index is the R2T transfer tag, so an
//! H2CData PDU finds its command with one index.

use nvme_spec::{Status, SubmissionQueueEntry};

/// Where a command is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotState {
    /// Not in use.
    Free,
    /// Receiving its in-capsule data.
    ReceivingInCapsuleData,
    /// Waiting for host data requested with R2T PDUs.
    ReceivingHostData,
    /// Storage operations are in flight.
    AwaitingStorage,
    /// An Asynchronous Event Request held until an event occurs.
    HeldAsyncEvent,
    /// An Abort held until the queue of the command it names answers.
    HeldAbort,
    /// A fused command with all its data, waiting for the other command of its pair
    /// or for its LBA range (see `fused`); also a write waiting for a range a fused
    /// pair holds.
    WaitingFused,
    /// Waiting for work off the I/O thread: a reservation command for its new state to
    /// be durable (PTPL), Namespace Management or Attachment for its pool table save.
    HeldPersist,
    /// Waiting for its namespace's or host's QoS limits (see `throttle`).
    Throttled,
}

/// A command's place in a fused operation (FUSE, CDW0 bits 9:8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FusedLink {
    /// Not fused.
    None,
    /// The first command (Compare); `second` once its partner arrived.
    First { second: Option<u16> },
    /// The second command (Write) of the pair whose first is in `first`.
    Second { first: u16 },
}

/// What to do when a command's storage operations finish.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PendingKind {
    /// Send the read data, then the response.
    Read,
    /// Respond (write-like commands: Write, Write Zeroes, Flush, Dataset Management).
    Write,
    /// Compare the read data (in `compare_buffer`) with the host's data.
    Compare,
    /// No data, no counting (Flush, Write Zeroes, Deallocate).
    Other,
    /// The read of a fused Compare (its data in `compare_buffer`).
    FusedCompare,
    /// The write of a fused pair, once the compare matched.
    FusedWrite,
    /// A whole pair as one compare-and-write of a backend that runs it atomically
    /// (on the first command's slot).
    FusedAtomic,
    /// The reads of a Copy's source ranges (gathered in `compare_buffer`).
    CopyRead,
    /// The write of a Copy at its destination.
    CopyWrite,
}

/// One outstanding command.
#[derive(Debug)]
pub struct CommandSlot {
    pub state: SlotState,
    pub sqe: SubmissionQueueEntry,
    /// Host data (in-capsule or H2CData) or data for the host (reads, Identify...).
    pub buffer: Vec<u8>,
    /// A second buffer for Compare (the data read from the namespace).
    pub compare_buffer: Vec<u8>,
    /// Bytes of host data this command carries (the SGL length).
    pub host_data_bytes: u32,
    /// Host data bytes received so far.
    pub received_bytes: u32,
    /// Host data bytes requested by R2T PDUs so far.
    pub requested_bytes: u32,
    /// A failure found while receiving data (e.g. data digest): reported when the data
    /// is complete, because the stream must stay in sync until then.
    pub deferred_status: Status,
    /// Storage operations in flight.
    pub pending_operations: u32,
    /// What finishing the storage operations means.
    pub pending_kind: PendingKind,
    /// First failure among the storage operations.
    pub storage_status: Status,
    /// Bytes of `buffer` to send to the host before the response.
    pub send_data_bytes: u32,
    /// When the command capsule arrived (latency is measured from here).
    pub received_at: Option<std::time::Instant>,
    /// Fused operation membership.
    pub fused: FusedLink,
    /// The namespace whose range this command (a fused pair's first, or nothing)
    /// holds; released when the pair ends or the connection closes.
    pub held_range: Option<std::sync::Arc<crate::namespaces::Namespace>>,
    /// A read's data as the backend lent it (sent from there instead of `buffer`).
    pub lent: Option<storage::LentBytes>,
    /// Booked against the QoS limits already (a command run again is not booked twice).
    pub qos_admitted: bool,
    /// When the command's first storage request went out (the Storage phase starts).
    pub storage_submitted_at: Option<std::time::Instant>,
    /// Time a QoS limit held the command (the Qos phase).
    pub qos_held_microseconds: u64,
}

impl CommandSlot {
    fn new() -> Self {
        CommandSlot {
            state: SlotState::Free,
            sqe: SubmissionQueueEntry::default(),
            buffer: Vec::new(),
            compare_buffer: Vec::new(),
            host_data_bytes: 0,
            received_bytes: 0,
            requested_bytes: 0,
            deferred_status: Status::SUCCESS,
            pending_operations: 0,
            pending_kind: PendingKind::Other,
            storage_status: Status::SUCCESS,
            send_data_bytes: 0,
            received_at: None,
            fused: FusedLink::None,
            held_range: None,
            lent: None,
            qos_admitted: false,
            storage_submitted_at: None,
            qos_held_microseconds: 0,
        }
    }

    /// Resets the per-command fields for a new command.
    fn reset(&mut self, sqe: SubmissionQueueEntry) {
        self.sqe = sqe;
        self.host_data_bytes = 0;
        self.received_bytes = 0;
        self.requested_bytes = 0;
        self.deferred_status = Status::SUCCESS;
        self.pending_operations = 0;
        self.pending_kind = PendingKind::Other;
        self.storage_status = Status::SUCCESS;
        self.send_data_bytes = 0;
        self.received_at = None;
        self.fused = FusedLink::None;
        self.held_range = None;
        self.lent = None;
        self.qos_admitted = false;
        self.storage_submitted_at = None;
        self.qos_held_microseconds = 0;
    }
}

/// The slots of one queue and a stack of free indices.
///
/// Slots are made as the host's commands in flight first reach each count, not at
/// Connect: a queue of 128 entries with one command at a time holds one slot (about
/// 200 bytes) instead of 128, so an idle or lightly used connection costs what it
/// uses. Once made, a slot stays (steady state allocates nothing).
#[derive(Debug)]
pub struct SlotTable {
    slots: Vec<CommandSlot>,
    free: Vec<u16>,
    /// The queue depth: the most slots the table makes.
    depth: u16,
    /// Stands in for a slot asked for by an index out of range (a bug of ours: every
    /// index used is one `allocate` gave, a transfer tag from the network goes through
    /// `get`), so that a release build goes on instead of panicking.
    spare: CommandSlot,
}

impl SlotTable {
    /// Room for `depth` slots, none made yet. Depth is bounded by the queue-depth
    /// limits (<= 1024).
    pub fn new(depth: u16) -> Self {
        SlotTable { slots: Vec::new(), free: Vec::new(), depth, spare: CommandSlot::new() }
    }

    /// The queue depth: the most commands the table holds at once.
    pub fn depth(&self) -> usize {
        usize::from(self.depth)
    }

    /// Slots made so far (indices `0..made()`), at most the depth.
    pub fn made(&self) -> usize {
        self.slots.len()
    }

    /// Slots in use.
    pub fn in_use(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// Takes a free slot for `sqe`; `None` when the host has more commands outstanding
    /// than the queue depth.
    pub fn allocate(&mut self, sqe: SubmissionQueueEntry) -> Option<u16> {
        // A free slot if there is one (the lowest-numbered freed last: easier to read
        // in captures), else a new one while the depth allows.
        let index = match self.free.pop() {
            Some(index) => index,
            None if self.slots.len() < usize::from(self.depth) => {
                self.slots.push(CommandSlot::new());
                (self.slots.len() - 1) as u16
            }
            None => return None,
        };
        let slot = self.slots.get_mut(index as usize)?;
        debug_assert_eq!(slot.state, SlotState::Free);
        slot.reset(sqe);
        slot.state = SlotState::ReceivingInCapsuleData;
        Some(index)
    }

    /// Returns a slot to the free list. Its buffers stay with the caller's pool.
    pub fn release(&mut self, index: u16) {
        let slot = self.slots.get_mut(index as usize);
        debug_assert!(slot.is_some(), "slot {index} released but out of range");
        let Some(slot) = slot else { return };
        assert_ne!(slot.state, SlotState::Free, "slot {index} released twice");
        slot.state = SlotState::Free;
        self.free.push(index);
    }

    /// The slot at `index`, read-only (out of range, a bug: the spare slot).
    pub fn slot_ref(&self, index: u16) -> &CommandSlot {
        debug_assert!(usize::from(index) < self.slots.len(), "slot {index} out of range");
        self.slots.get(usize::from(index)).unwrap_or(&self.spare)
    }

    /// The slot at `index` (a transfer tag from the network is checked with `get`);
    /// out of range, a bug: the spare slot.
    pub fn slot(&mut self, index: u16) -> &mut CommandSlot {
        debug_assert!(usize::from(index) < self.slots.len(), "slot {index} out of range");
        match self.slots.get_mut(index as usize) {
            Some(slot) => slot,
            None => &mut self.spare,
        }
    }

    /// The slot at `index` if it exists.
    pub fn get(&mut self, index: u16) -> Option<&mut CommandSlot> {
        self.slots.get_mut(index as usize)
    }

    /// Bytes allocated for the slots' data buffers.
    pub fn buffer_bytes(&self) -> u64 {
        self.slots.iter().map(|slot| (slot.buffer.capacity() + slot.compare_buffer.capacity()) as u64).sum()
    }

    /// Indices of slots in `state`.
    pub fn indices_in_state(&self, state: SlotState) -> impl Iterator<Item = u16> + '_ {
        self.slots.iter().enumerate().filter(move |(_, slot)| slot.state == state).map(|(index, _)| index as u16)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_run_out_at_the_depth_and_come_back() {
        let mut table = SlotTable::new(2);
        let a = table.allocate(SubmissionQueueEntry::default()).unwrap();
        let b = table.allocate(SubmissionQueueEntry::default()).unwrap();
        assert_ne!(a, b);
        assert!(table.allocate(SubmissionQueueEntry::default()).is_none());
        assert_eq!(table.in_use(), 2);
        table.release(a);
        assert_eq!(table.allocate(SubmissionQueueEntry::default()), Some(a));
        assert!(table.get(2).is_none());
    }

    #[test]
    fn slots_are_made_as_commands_in_flight_first_reach_each_count() {
        let mut table = SlotTable::new(128);
        assert_eq!((table.depth(), table.made()), (128, 0), "nothing made at Connect");
        for _ in 0..1000 {
            let index = table.allocate(SubmissionQueueEntry::default()).unwrap();
            assert_eq!(index, 0, "one command at a time reuses slot 0");
            table.release(index);
        }
        assert_eq!(table.made(), 1);
        let held: Vec<u16> = (0..128).map(|_| table.allocate(SubmissionQueueEntry::default()).unwrap()).collect();
        assert_eq!(held, (0..128).collect::<Vec<u16>>(), "every index below the depth, once");
        assert!(table.allocate(SubmissionQueueEntry::default()).is_none(), "the depth still bounds it");
        assert_eq!(table.made(), 128);
        assert!(table.get(127).is_some() && table.get(128).is_none());
    }
}
