//! What a seed draws before the run starts: the shape of the world and how hostile it
//! is.

use nvme_tcp_wire::DigestSettings;

use crate::disk::DiskFaults;
use crate::disks::StorageShape;
use crate::network::NetworkFaults;
use crate::rng::Rng;

/// How a host drives its queues; drawn from the seed.
#[derive(Clone, Debug)]
pub struct HostSettings {
    /// I/O queues per controller.
    pub io_queues: u16,
    /// I/O queue size (SQSIZE + 1).
    pub queue_size: u16,
    /// Commands the workload keeps outstanding at most.
    pub queue_depth: usize,
    /// Largest I/O in blocks.
    pub max_io_blocks: u32,
    /// KATO asked for in the admin Connect.
    pub keep_alive_timeout_ms: u32,
    /// A command outstanding longer fails the queue.
    pub command_timeout_ms: u64,
    /// HDGST / DDGST.
    pub digests: DigestSettings,
    /// MAXR2T offered in ICReq (0's based).
    pub max_r2t_outstanding: u32,
    /// Chance, each time the host is serviced, that it aborts a command picked by CID.
    pub abort_per_million: u32,
    /// Chance, each time the host is serviced, that it takes the next step with a
    /// namespace of its own in the pool: create, attach, detach, delete (0 without a
    /// pool).
    pub namespace_management_per_million: u32,
    /// Reads name a destination, so their data goes straight into the host's memory as
    /// it arrives (as the fio engine's do) instead of into the completion.
    pub direct_reads: bool,
    /// Writes name a source, so their data is sent from the host's memory (as the fio
    /// engine's writes in place are) instead of from the command's buffer.
    pub source_writes: bool,
    /// Every third send stays "in flight" (the batch holding the commands' data is
    /// kept) for a while, as a ring's send whose completion comes after the target's
    /// responses: those commands must complete only once it is over.
    pub hold_sends: bool,
}

/// One seed's world.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Hosts sharing the namespace.
    pub hosts: usize,
    /// Namespace block size.
    pub block_bytes: usize,
    /// Namespace size in blocks (small, so hosts collide on blocks often).
    pub namespace_blocks: u64,
    /// Every host's settings.
    pub host: HostSettings,
    /// The network's behaviour.
    pub network: NetworkFaults,
    /// The disk's behaviour.
    pub disk: DiskFaults,
    /// Mean time between injected faults (crash, reset, partition); 0 for none.
    pub mean_fault_interval_ns: u64,
    /// The target's R2T budget per connection (the smallest it takes, one MDTS, makes
    /// commands wait).
    pub r2t_budget_bytes: u32,
    /// The namespace is a thin carve of a pool on the disk, with allocation units of
    /// this many bytes (mappings made by writes become durable on Flush or FUA).
    pub thin_pool_unit_bytes: Option<u64>,
    /// The disks under the namespace (one disk whenever there is a thin pool).
    pub shape: StorageShape,
    /// Simulated time the workload runs.
    pub run_ns: u64,
    /// I/O commands the hosts submit at most, together (bounds a seed's wall time).
    pub max_commands: u64,
}

const MS: u64 = 1_000_000;
const US: u64 = 1_000;

impl Plan {
    /// Draws a world: about a quarter of seeds are calm (no faults at all), so a bug
    /// in the plain data path is not hidden behind a fault.
    pub fn draw(rng: &mut Rng) -> Plan {
        let mut plan = Self::draw_base(rng);
        // Half the seeds, chosen by a parity already drawn, so that no later draw of
        // the seed moves.
        plan.host.direct_reads = plan.namespace_blocks % 2 == 1;
        // Two more bits of the same draw: writes from host memory, held sends.
        plan.host.source_writes = (plan.namespace_blocks / 2) % 2 == 1;
        plan.host.hold_sends = (plan.namespace_blocks / 4) % 2 == 1;
        if plan.thin_pool_unit_bytes.is_some() {
            plan.host.namespace_management_per_million = [0, 2_000, 20_000][rng.below(3) as usize];
        } else {
            plan.shape = StorageShape::draw(rng);
        }
        plan
    }

    fn draw_base(rng: &mut Rng) -> Plan {
        let calm = rng.chance(250_000);
        let block_bytes = if rng.chance(750_000) { 512 } else { 4096 };
        let queue_size = rng.between(2, 32) as u16;
        let digests = DigestSettings { header: rng.chance(500_000), data: rng.chance(500_000) };
        let max_segment_bytes = [100, 1460, 9000, 65536][rng.below(4) as usize];
        let keep_alive_timeout_ms = rng.between(1_000, 4_000) as u32;
        Plan {
            hosts: rng.between(1, 3) as usize,
            block_bytes,
            namespace_blocks: rng.between(8, 256),
            host: HostSettings {
                io_queues: rng.between(1, 3) as u16,
                max_r2t_outstanding: rng.below(4) as u32,
                abort_per_million: if calm { 0 } else { [0, 100, 1_000][rng.below(3) as usize] },
                namespace_management_per_million: 0,
                direct_reads: false,
                source_writes: false,
                hold_sends: false,
                queue_size,
                queue_depth: rng.between(1, u64::from(queue_size - 1).min(16)) as usize,
                max_io_blocks: if block_bytes == 512 { rng.between(1, 64) as u32 } else { rng.between(1, 8) as u32 },
                keep_alive_timeout_ms,
                command_timeout_ms: rng.between(1_500, 5_000),
                digests,
            },
            network: NetworkFaults {
                latency_min_ns: 5 * US,
                latency_max_ns: rng.between(5 * US, 500 * US),
                max_segment_bytes,
                tiny_segment_per_million: [0, 10_000, 100_000, 300_000][rng.below(4) as usize],
                corrupt_per_million: if calm { 0 } else { rng.between(0, 300) as u32 },
            },
            disk: DiskFaults {
                latency_min_ns: 2 * US,
                latency_max_ns: rng.between(2 * US, 2 * MS),
                spike_per_million: if calm { 0 } else { rng.between(0, 20_000) as u32 },
                spike_ns: rng.between(10 * MS, 800 * MS),
                read_error_per_million: if calm { 0 } else { rng.between(0, 3_000) as u32 },
                write_error_per_million: if calm { 0 } else { rng.between(0, 3_000) as u32 },
            },
            mean_fault_interval_ns: if calm { 0 } else { rng.between(10 * MS, 150 * MS) },
            r2t_budget_bytes: [16 << 20, 1 << 20, 128 << 10][rng.below(3) as usize],
            thin_pool_unit_bytes: rng.chance(500_000).then(|| (block_bytes as u64) << rng.below(4)),
            shape: StorageShape::Disk,
            run_ns: 300 * MS,
            max_commands: 4_000,
        }
    }

    /// One line: what this seed is.
    pub fn describe(&self) -> String {
        let pool = match self.thin_pool_unit_bytes {
            Some(unit) => format!(
                " (thin carve, {unit} B units, namespace management {} ppm)",
                self.host.namespace_management_per_million
            ),
            None => String::new(),
        };
        format!(
            "{} host(s), {} x {} B blocks{pool}{}, {} queue(s) of {} at QD {}, MAXR2T {}, R2T budget {} KiB, I/O up to {} blocks{}{}, digests {}{}, segments <= {} B ({} ppm tiny), \
             faults every ~{} ms, disk errors {}/{} ppm, spikes {} ppm, bit flips {} ppm",
            self.hosts,
            self.namespace_blocks,
            self.block_bytes,
            self.shape.describe(),
            self.host.io_queues,
            self.host.queue_size,
            self.host.queue_depth,
            self.host.max_r2t_outstanding + 1,
            self.r2t_budget_bytes >> 10,
            self.host.max_io_blocks,
            match (self.host.direct_reads, self.host.source_writes) {
                (true, true) => ", reads into and writes from host memory",
                (true, false) => ", reads into host memory",
                (false, true) => ", writes from host memory",
                (false, false) => "",
            },
            if self.host.hold_sends { ", sends held in flight" } else { "" },
            if self.host.digests.header { "H" } else { "-" },
            if self.host.digests.data { "D" } else { "-" },
            self.network.max_segment_bytes,
            self.network.tiny_segment_per_million,
            self.mean_fault_interval_ns / MS,
            self.disk.read_error_per_million,
            self.disk.write_error_per_million,
            self.disk.spike_per_million,
            self.network.corrupt_per_million,
        )
    }
}
