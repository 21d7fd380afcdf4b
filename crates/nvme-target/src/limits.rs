//! Every limit the target enforces, with where its value comes from. Limits protect
//! the target from hostile or broken hosts: nothing from the network is buffered
//! before its length is checked against one of these.

/// Largest `in_capsule_data_bytes` (in-capsule data of one command, advertised
/// through IOCCSZ): the maximum data transfer size, so that every write can travel in
/// its command capsule. The PDU reader never accepts more data in one PDU.
pub const MAX_IN_CAPSULE_DATA_BYTES: u32 = MAX_DATA_TRANSFER_BYTES;

/// In-capsule data of an admin queue's commands, and of the Connect command that
/// binds any queue: NVMe/TCP fixes it at 8 KiB (IOCCSZ describes I/O queues only).
pub const ADMIN_IN_CAPSULE_DATA_BYTES: u32 = 8192;

/// Smallest `in_capsule_data_bytes`: what an admin queue takes, which holds Connect
/// data (1 KiB) and a full Dataset Management range list (4 KiB).
pub const MIN_IN_CAPSULE_DATA_BYTES: u32 = ADMIN_IN_CAPSULE_DATA_BYTES;

/// MAXH2CDATA: the largest H2CData PDU data the target accepts, advertised in ICResp.
/// 128 KiB matches SPDK's default and equals the maximum data transfer size, so one
/// R2T is answered by one H2CData PDU for the largest command. The spec requires a
/// multiple of 4 and at least 4096.
pub const MAX_H2C_DATA_BYTES: u32 = 128 * 1024;

/// Largest data transfer of one command (MDTS). 128 KiB is SPDK's default
/// `max_io_size`; the Linux host splits larger block requests. It bounds the buffer
/// one command slot can hold.
pub const MAX_DATA_TRANSFER_BYTES: u32 = 128 * 1024;

/// MDTS encoding: transfer size as a power of two in units of the minimum memory page
/// size (CAP.MPSMIN = 4 KiB). 4 KiB << 5 = 128 KiB.
pub const MAX_DATA_TRANSFER_SIZE_LOG2_PAGES: u8 = 5;

/// The minimum memory page size CAP.MPSMIN describes (2 ^ (12 + MPSMIN)).
pub const MEMORY_PAGE_BYTES: u32 = 4096;

/// Largest C2HData PDU the target sends. The host accepts any size; splitting at
/// 128 KiB keeps each PDU's data digest computation and iovec bounded.
pub const MAX_C2H_DATA_PDU_BYTES: u32 = 128 * 1024;

/// Smallest read whose data is sent from memory the backend lends (a RAM namespace's
/// own bytes) instead of a copy: every whole block. Lending costs a reference count
/// the backend queue keeps per queue (so per thread, uncontended); copying a 4 KiB
/// block from a random place in a large namespace cost 40 % of the target's CPU at
/// QD128, and lending 4 KiB reads measured +18-25 % IOPS at QD32
/// (docs/results/target-vs-spdk.md).
pub const LEND_READ_MIN_BYTES: u32 = 512;

/// Largest R2T length the target asks for at once. Equal to MAXH2CDATA so each R2T is
/// answered by one H2CData PDU.
pub const MAX_R2T_LENGTH_BYTES: u32 = MAX_H2C_DATA_BYTES;

/// Deepest I/O queue a host may create (CAP.MQES + 1). The issue asks for at least
/// 128; 1024 covers hosts that ask for deep queues (the Linux default is 128).
pub const MAX_IO_QUEUE_DEPTH: u16 = 1024;

/// Idle data buffers a connection keeps beyond one per queue entry, for reuse.
pub const SPARE_DATA_BUFFERS: usize = 8;

/// Data buffer bytes one connection of `queue_depth` entries may hold at most: per
/// entry its data buffer and a second one (Compare's read, Copy's gathered blocks), one
/// more on its way out in the transmit queue, and the idle buffers kept for reuse
/// (`queue_depth + SPARE_DATA_BUFFERS`). Each is at most `MAX_DATA_TRANSFER_BYTES`
/// long, and its allocation at most twice that (a growing `Vec` may over-allocate).
/// The simulator checks every connection against it after every step.
pub fn max_connection_buffer_bytes(queue_depth: u16) -> u64 {
    let buffers = 4 * u64::from(queue_depth) + SPARE_DATA_BUFFERS as u64;
    buffers * 2 * u64::from(MAX_DATA_TRANSFER_BYTES)
}

/// Deepest admin queue (the Linux host uses 32, NVME_AQ_DEPTH). Admin commands are
/// few; a deeper admin queue only costs slots.
pub const MAX_ADMIN_QUEUE_DEPTH: u16 = 128;

/// Most I/O queues one controller may have (upper bound for the configured value).
pub const MAX_IO_QUEUES_PER_CONTROLLER: u16 = 128;

/// Highest namespace id a subsystem may use (reported as NN). At least 1024
/// namespaces per subsystem are required; NSIDs index a table, so this bounds it.
pub const MAX_NAMESPACE_ID: u32 = 4096;

/// ANAGRPMAX and NANAGRPID: the highest ANA group id, and how many groups a
/// controller reports at most. One group per gateway of a gateway group is the usual
/// layout (each gateway owns one group); 64 leaves room for many gateways and for
/// spreading namespaces of one gateway over several groups. With MAX_NAMESPACE_ID it
/// bounds the ANA log: 16 + 64 x 32 + 4096 x 4 bytes = 18 KiB, within MDTS (the Linux
/// host turns ANA off when the log could exceed MDTS).
pub const MAX_ANA_GROUP_ID: u32 = 64;

/// ANATT: seconds a group may stay in the Change state before a host treats the path
/// as failed. 10 s is the Linux target's value; a takeover turns its groups optimized
/// well within it.
pub const ANA_TRANSITION_TIME_SECONDS: u8 = 10;

/// AERL + 1: asynchronous event requests a controller holds at once.
pub const MAX_OUTSTANDING_ASYNC_EVENTS: u16 = 4;

/// ACL + 1: Abort commands outstanding at once.
pub const MAX_OUTSTANDING_ABORTS: u16 = 4;

/// Dataset Management ranges per command: NR is 8 bits, 0's based.
pub const MAX_DATASET_RANGES: u32 = 256;

/// Largest Reservation Report a host may ask for (NUMD, 0's based dwords, up to
/// 16 GiB as sent): one data transfer (MDTS), as for every other command. The report
/// itself is at most 64 + 64 x `MAX_REGISTRANTS` bytes (4160); what a host asks for
/// beyond it is sent as zeroes. Checked before the answer's buffer is allocated.
pub const MAX_RESERVATION_REPORT_BYTES: u32 = MAX_DATA_TRANSFER_BYTES;

/// Longest `connection_setup_timeout_ms` accepted (the setting: a connection that has
/// not sent ICReq and a successful Connect within it is closed).
pub const MAX_CONNECTION_SETUP_TIMEOUT_MS: u64 = 3_600_000;

/// Longest `command_quiesce_timeout_ms` accepted: a host reconnecting waits at most
/// this long for its dead queues' storage requests (Linux gives up on an admin
/// Connect after 60 s).
pub const MAX_COMMAND_QUIESCE_TIMEOUT_MS: u32 = 50_000;

/// Longest an I/O queue's Connect is held for a quiesce, whatever the setting: Linux
/// gives up on it after its I/O timeout (30 s by default).
pub const MAX_IO_CONNECT_HOLD_MS: u64 = 20_000;

/// Largest `max_outstanding_r2t_bytes_per_connection` accepted: 1 GiB of host data
/// requested at once on one connection is already more than any queue needs.
pub const MAX_OUTSTANDING_R2T_BYTES_LIMIT: u32 = 1 << 30;

/// Keep-alive timeout of a discovery controller whose host sent KATO 0 (the Linux
/// host does for a one-shot `nvme discover`). As nvmet: a discovery session that
/// never sends Keep Alive still ends 2 minutes after the last one, so a host that
/// vanishes does not hold it forever. Clamped into the configured KATO range.
pub const DISCOVERY_KEEP_ALIVE_TIMEOUT_MS: u32 = 120_000;

/// A refusal that keeps happening (a host retrying a refused Connect, connections that
/// never finish setup) is logged again at most this often, with the number of
/// refusals not logged in between.
pub const REFUSAL_LOG_REPEAT_MS: u64 = 60_000;

/// How often an I/O queue checks whether its controller was torn down (keep-alive
/// expiry, admin queue loss, controller reset on another thread).
pub const CONTROLLER_CHECK_INTERVAL_MS: u64 = 1_000;

/// How often a Preempt and Abort waiting for the preempted hosts' writes at storage
/// (`write_fence`) looks whether they completed, when they run on other threads.
pub const FENCE_CHECK_INTERVAL_MS: u64 = 1;

/// How often a held Connect looks whether the host's previous controller is quiet
/// (see `quiesce`).
pub const QUIESCE_CHECK_INTERVAL_MS: u64 = 10;
/// How often an admin queue holding Asynchronous Event Requests looks for events
/// raised by other queues (namespace changes), in milliseconds: the delay before a
/// host hears of a new namespace.
pub const ASYNC_EVENT_CHECK_INTERVAL_MS: u64 = 200;

/// Error Information log entries (ELPE + 1).
pub const ERROR_LOG_ENTRIES: u32 = 64;

/// Keep-alive granularity advertised in KAS, in units of 100 ms (10 = 1 s).
pub const KEEP_ALIVE_GRANULARITY_100MS: u16 = 10;

/// CAP.TO: worst-case time to become ready, in 500 ms units (15 = 7.5 s, as nvmet).
pub const READY_TIMEOUT_500MS: u8 = 15;

/// Logs a repeated refusal once per burst: the first refusal is logged, later ones
/// only counted until `REFUSAL_LOG_REPEAT_MS` passed (then one line with the count),
/// and `cleared` ends the burst. Sans-io: the caller passes the time.
#[derive(Debug, Default)]
pub struct RefusalLog {
    logged_at: Option<std::time::Instant>,
    unlogged: u64,
}

impl RefusalLog {
    /// A refusal happened. `Some(n)` when it should be logged now, `n` being the
    /// refusals not logged since the previous line; `None` when it is only counted.
    pub fn refused(&mut self, now: std::time::Instant) -> Option<u64> {
        let repeat = std::time::Duration::from_millis(REFUSAL_LOG_REPEAT_MS);
        match self.logged_at {
            Some(at) if now.saturating_duration_since(at) < repeat => {
                self.unlogged += 1;
                None
            }
            _ => {
                self.logged_at = Some(now);
                Some(std::mem::take(&mut self.unlogged))
            }
        }
    }

    /// The condition ended (the host was admitted again). `Some(n)` when a burst was
    /// logged, `n` being its refusals not logged yet.
    pub fn cleared(&mut self) -> Option<u64> {
        self.logged_at.take().map(|_| std::mem::take(&mut self.unlogged))
    }
}

/// Fused Compare and Write pairs holding a range at once on one namespace. Each holds
/// its range for one read and one write; more waiting pairs wait their turn. Bounds
/// the table a write scans while pairs run.
pub const MAX_HELD_COMPARE_AND_WRITE_RANGES: usize = 256;

/// ACWU: atomic compare and write unit, in blocks, 0's based as Identify reports it.
/// A pair's range is held for its whole length, so any pair up to MDTS is atomic;
/// 0's based 31 is 32 blocks (128 KiB of 4 KiB blocks), what the smallest MDTS
/// allows for 4 KiB blocks.
pub const ATOMIC_COMPARE_AND_WRITE_UNIT_ZERO_BASED: u16 = 31;

/// Source ranges one Copy may name (MSRC + 1). 128 entries of 32 bytes are 4 KiB of
/// host data, which fits in-capsule; Linux's copy offload patches use the same bound.
pub const MAX_COPY_SOURCE_RANGES: usize = 128;

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn a_burst_of_refusals_is_logged_once_then_once_per_interval() {
        let mut log = RefusalLog::default();
        let start = Instant::now();
        assert_eq!(log.refused(start), Some(0));
        for step in 1..=100 {
            assert_eq!(log.refused(start + Duration::from_millis(step * 10)), None);
        }
        assert_eq!(log.refused(start + Duration::from_millis(REFUSAL_LOG_REPEAT_MS)), Some(100));
        assert_eq!(log.refused(start + Duration::from_millis(REFUSAL_LOG_REPEAT_MS + 1)), None);
        assert_eq!(log.cleared(), Some(1));
        assert_eq!(log.cleared(), None);
        // A new burst is logged at once.
        assert_eq!(log.refused(start + Duration::from_millis(REFUSAL_LOG_REPEAT_MS + 2)), Some(0));
    }
}
