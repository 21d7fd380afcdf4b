//! A simulated TCP connection: two ordered byte pipes with latency, arbitrary
//! segmentation, partitions, resets and bit flips.
//!
//! Order within one direction is kept (TCP's promise); across connections nothing is
//! ordered, so the world interleaves deliveries of different links freely.

use std::collections::VecDeque;

use crate::rng::Rng;

/// How the network misbehaves. Per-segment and per-step probabilities in parts per
/// million.
#[derive(Clone, Debug)]
pub struct NetworkFaults {
    /// Shortest one-way delay.
    pub latency_min_ns: u64,
    /// Longest one-way delay.
    pub latency_max_ns: u64,
    /// Largest piece bytes are cut into.
    pub max_segment_bytes: usize,
    /// A piece is cut tiny instead (1 to 16 bytes), so PDU boundaries fall anywhere;
    /// every byte its own segment would make a run crawl.
    pub tiny_segment_per_million: u32,
    /// A segment has one bit flipped.
    pub corrupt_per_million: u32,
}

/// Bytes on their way, delivered at `deliver_at_ns`.
struct Segment {
    deliver_at_ns: u64,
    bytes: Vec<u8>,
}

/// One direction of a connection.
#[derive(Default)]
pub struct Pipe {
    segments: VecDeque<Segment>,
    last_deliver_at_ns: u64,
    /// FIN sent after the queued bytes: the receiver sees the end once they are
    /// delivered.
    closed: bool,
}

impl Pipe {
    /// Queues `bytes` cut into random segments. Returns true when a bit was flipped.
    pub fn send(&mut self, bytes: &[u8], now_ns: u64, rng: &mut Rng, faults: &NetworkFaults) -> bool {
        let mut corrupted = false;
        let mut rest = bytes;
        while !rest.is_empty() {
            let longest =
                if rng.chance(faults.tiny_segment_per_million) { 16 } else { faults.max_segment_bytes.max(1) };
            let length = (1 + rng.below(longest as u64) as usize).min(rest.len());
            let (head, tail) = rest.split_at(length);
            rest = tail;
            let mut piece = head.to_vec();
            if rng.chance(faults.corrupt_per_million) {
                let bit = rng.below(piece.len() as u64 * 8);
                piece[(bit / 8) as usize] ^= 1 << (bit % 8);
                corrupted = true;
            }
            let delay = rng.between(faults.latency_min_ns, faults.latency_max_ns);
            let deliver_at_ns = (now_ns + delay).max(self.last_deliver_at_ns);
            self.last_deliver_at_ns = deliver_at_ns;
            self.segments.push_back(Segment { deliver_at_ns, bytes: piece });
        }
        corrupted
    }

    /// The next segment due by `now_ns`, if any.
    pub fn take_due(&mut self, now_ns: u64) -> Option<Vec<u8>> {
        if self.segments.front()?.deliver_at_ns <= now_ns {
            self.segments.pop_front().map(|segment| segment.bytes)
        } else {
            None
        }
    }

    /// When the next segment is due.
    pub fn next_due_ns(&self) -> Option<u64> {
        self.segments.front().map(|segment| segment.deliver_at_ns)
    }

    /// The sender closed and every byte it sent has been delivered.
    pub fn ended(&self) -> bool {
        self.closed && self.segments.is_empty()
    }

    /// The sender closes after what it queued.
    pub fn close(&mut self) {
        self.closed = true;
    }

    /// Bytes queued and not delivered.
    pub fn queued_bytes(&self) -> usize {
        self.segments.iter().map(|segment| segment.bytes.len()).sum()
    }

    fn reset(&mut self) {
        self.segments.clear();
        self.closed = true;
    }
}

/// Which queue of which host a link carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkOwner {
    /// Index of the host.
    pub host: usize,
    /// True for the admin queue.
    pub admin: bool,
}

/// One TCP connection between a host queue and the target.
pub struct Link {
    /// Who opened it.
    pub owner: LinkOwner,
    /// Host to target.
    pub to_target: Pipe,
    /// Target to host.
    pub to_host: Pipe,
    /// Nothing is delivered either way before this (a partition; TCP retransmits
    /// afterwards, so nothing is lost).
    pub held_until_ns: u64,
    /// Torn down with RST: both sides see the end at once, queued bytes are lost.
    pub reset: bool,
    /// The target side has let go of it (its connection is closed or never existed).
    pub target_gone: bool,
    /// The host side has let go of it.
    pub host_gone: bool,
}

impl Link {
    /// A new connection from `owner`.
    pub fn new(owner: LinkOwner) -> Self {
        Link {
            owner,
            to_target: Pipe::default(),
            to_host: Pipe::default(),
            held_until_ns: 0,
            reset: false,
            target_gone: false,
            host_gone: false,
        }
    }

    /// RST: queued bytes are dropped and both ends see the connection end.
    pub fn reset(&mut self) {
        self.reset = true;
        self.to_target.reset();
        self.to_host.reset();
    }

    /// The earliest time something is due on this link.
    pub fn next_due_ns(&self) -> Option<u64> {
        let next = match (self.to_target.next_due_ns(), self.to_host.next_due_ns()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        next.map(|at| at.max(self.held_until_ns))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn faults(max_segment_bytes: usize, corrupt_per_million: u32) -> NetworkFaults {
        NetworkFaults {
            latency_min_ns: 10,
            latency_max_ns: 1000,
            max_segment_bytes,
            tiny_segment_per_million: 0,
            corrupt_per_million,
        }
    }

    #[test]
    fn bytes_arrive_in_order_however_they_are_cut() {
        let mut rng = Rng::new(1);
        let mut pipe = Pipe::default();
        let sent: Vec<u8> = (0..=255).collect();
        assert!(!pipe.send(&sent[..100], 0, &mut rng, &faults(7, 0)));
        assert!(!pipe.send(&sent[100..], 5, &mut rng, &faults(7, 0)));
        let mut received = Vec::new();
        let mut now = 0;
        while let Some(at) = pipe.next_due_ns() {
            now = now.max(at);
            while let Some(bytes) = pipe.take_due(now) {
                received.extend_from_slice(&bytes);
            }
        }
        assert_eq!(received, sent);
        pipe.close();
        assert!(pipe.ended());
    }

    #[test]
    fn a_corrupting_network_flips_one_bit_per_segment() {
        let mut rng = Rng::new(2);
        let mut pipe = Pipe::default();
        let sent = vec![0u8; 64];
        assert!(pipe.send(&sent, 0, &mut rng, &faults(64, 1_000_000)));
        let received = pipe.take_due(u64::MAX).unwrap();
        assert_eq!(received.iter().map(|byte| byte.count_ones()).sum::<u32>(), 1);
    }
}
