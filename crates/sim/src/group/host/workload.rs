//! The group host's workload: reservation commands one at a time, reads and writes
//! of the data blocks, reads of the lock blocks and fused Compare and Write on them.

use nvme_host::commands;

use super::{key_of, other_key, GroupHost, Work, REPORT_BYTES};
use crate::group::context::{GroupContext, LOCK_BLOCKS};
use crate::group::reference::{host_identifier, TYPES};
use crate::host::NAMESPACE;
use crate::oracle::{fill_block, WriteOutcome};

impl GroupHost {
    pub(super) fn submit_workload(&mut self, context: &mut GroupContext) {
        let namespace_blocks = context.oracle.block_count();
        let now_ns = context.clock.elapsed_ns();
        while self.io_in_flight() < self.settings.queue_depth && context.io_budget > 0 && now_ns >= self.next_submit_ns
        {
            // Paced, so that the budget lasts the run and faults fall amid the work.
            let think_ns = self.settings.think_ns;
            self.next_submit_ns = now_ns + context.rng.between(think_ns / 2, think_ns * 3 / 2);
            context.io_budget -= 1;
            let floor = context.group.floor();
            let choice = context.rng.below(100);
            if choice < 25 {
                if !self.reservation_in_flight() {
                    self.submit_reservation(context);
                }
                return;
            }
            if choice < 45 && self.io_in_flight() + 2 <= self.settings.queue_depth {
                self.submit_compare_and_write(context);
                continue;
            }
            let lba_count = namespace_blocks - LOCK_BLOCKS;
            let blocks = context.rng.between(1, self.settings.max_io_blocks).min(lba_count);
            let lba = LOCK_BLOCKS + context.rng.below(lba_count - blocks + 1);
            let (command, work) = if choice < 55 {
                let lba = context.rng.below(LOCK_BLOCKS);
                (commands::read(NAMESPACE, lba, 1, 512), Work::LockRead { lba, floor })
            } else if choice < 75 || !context.oracle.can_write(lba, blocks) {
                let watch = context.oracle.begin_read(lba, blocks);
                (commands::read(NAMESPACE, lba, blocks as u32, 512), Work::Read { watch, floor })
            } else {
                let tag = context.new_write_tag(self.index);
                let mut data = vec![0; blocks as usize * 512];
                for (offset, block) in data.chunks_mut(512).enumerate() {
                    fill_block(tag, lba + offset as u64, block);
                }
                context.oracle.begin_write(lba, blocks, tag);
                (commands::write(NAMESPACE, lba, data, 512, false), Work::Write { lba, blocks, tag, floor })
            };
            if !self.submit(context, true, command, work.clone()) {
                self.abandon_unsent(context, work);
                return;
            }
        }
    }

    /// A command the queue refused never went out: it did not happen.
    fn abandon_unsent(&mut self, context: &mut GroupContext, work: Work) {
        match work {
            Work::Read { watch, .. } => {
                let _ = context.oracle.end_read(watch, None);
            }
            Work::Write { lba, blocks, tag, .. } => {
                context.oracle.end_write(lba, blocks, tag, WriteOutcome::NotApplied)
            }
            _ => {}
        }
    }

    /// One reservation command: mostly with the host's own key, sometimes a wrong
    /// one; Preempt names another host's key.
    fn submit_reservation(&mut self, context: &mut GroupContext) {
        let Some(link) = self.io.as_ref().map(|end| end.link) else {
            return;
        };
        let Some(&instance) = context.link_instance.get(&link) else {
            return;
        };
        // Mostly the key the host believes it holds, sometimes the other of its two
        // (a wrong one, or right after a Replace whose answer was lost).
        let key = if context.rng.chance(80_000) { other_key(self.key) } else { self.key };
        let kind = TYPES[context.rng.below(TYPES.len() as u64) as usize];
        // Preempt mostly names a host that has writes out now (so its writes at
        // storage meet the fence), else any host's key (either of its two), or its own.
        let writers: Vec<usize> =
            (0..context.writing.len()).filter(|&host| host != self.index && context.writing[host] > 0).collect();
        let preempt_key = if !writers.is_empty() && context.rng.chance(750_000) {
            context.keys[writers[context.rng.below(writers.len() as u64) as usize]]
        } else if context.rng.chance(200_000) {
            other_key(key_of(context.rng.below(4) as u8))
        } else {
            key_of(context.rng.below(4) as u8)
        };
        // Mostly Preempt and Abort (the state changes as for Preempt).
        let preempt = if context.rng.chance(750_000) { 2 } else { 1 };
        // CPTPL: mostly no change, else PTPL off or on.
        let persist = [0, 0, 0, 2, 3][context.rng.below(5) as usize];
        let mut replaced_to = None;
        let command = match context.rng.below(100) {
            0..=20 => commands::reservation_register(NAMESPACE, 0, false, persist, 0, key),
            21..=27 => commands::reservation_register(NAMESPACE, 1, false, persist, key, 0),
            28..=31 => {
                replaced_to = Some(other_key(key));
                commands::reservation_register(NAMESPACE, 2, false, persist, key, other_key(key))
            }
            32..=55 => commands::reservation_acquire(NAMESPACE, 0, false, kind, key, 0),
            56..=71 => commands::reservation_acquire(NAMESPACE, preempt, false, kind, key, preempt_key),
            72..=85 => commands::reservation_release(NAMESPACE, 0, false, kind, key),
            86..=89 => commands::reservation_release(NAMESPACE, 1, false, 0, key),
            _ => {
                let floor = context.group.floor();
                let command = commands::reservation_report(NAMESPACE, REPORT_BYTES, true);
                self.submit(context, true, command, Work::Report { floor });
                return;
            }
        };
        self.reservation_commands += 1;
        let calls_before = context.cluster.calls(instance, host_identifier(self.index));
        self.submit(context, true, command, Work::Reservation { calls_before, instance, replaced_to });
    }

    /// A fused Compare and Write of a lock block from the value the host saw last to
    /// a new one of its own.
    fn submit_compare_and_write(&mut self, context: &mut GroupContext) {
        let room = self.io.as_ref().is_some_and(|end| end.queue.capacity() - end.queue.outstanding() >= 2);
        if !room {
            return;
        }
        let floor = context.group.floor();
        let lba = context.rng.below(LOCK_BLOCKS);
        let compare = self.lock_values[lba as usize];
        let new = context.new_write_tag(self.index);
        let mut expected = vec![0; 512];
        fill_block(compare, lba, &mut expected);
        let mut data = vec![0; 512];
        fill_block(new, lba, &mut data);
        let [first, second] = commands::compare_and_write(NAMESPACE, lba, expected, data, 512);
        let sent = self.submit(context, true, first, Work::Compare { floor })
            && self.submit(context, true, second, Work::CompareWrite { lba, compare, new, floor });
        if !sent {
            context.violation(format!("host {}: a queue with room for two commands refused a fused pair", self.index));
        }
    }
}
