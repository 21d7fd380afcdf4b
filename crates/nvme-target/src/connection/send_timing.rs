//! The Send phase of the latency split (`stats::IoPhase::Send`): from a command's
//! storage completion until the batch holding its response was written to the
//! socket. Responses are not tracked one by one in the batch: the runtime sends one
//! batch at a time and a batch takes every response queued so far, so the responses
//! completed before `take_transmit` are exactly those the next `transmit_complete`
//! reports sent.

use std::time::Instant;

use nvme_spec::NamespaceId;

/// A counted command whose response is queued or being sent.
#[derive(Clone, Copy, Debug)]
struct Completed {
    namespace_id: NamespaceId,
    completed_at: Instant,
}

/// The responses of counted commands not yet reported sent. Both lists keep their
/// room, so steady state never allocates.
#[derive(Debug, Default)]
pub(crate) struct SendTiming {
    /// Completed since the last batch was taken.
    queued: Vec<Completed>,
    /// In the batch the runtime is sending.
    sending: Vec<Completed>,
}

impl SendTiming {
    /// A counted command completed at `now`; its response is queued.
    pub(crate) fn completed(&mut self, namespace_id: NamespaceId, now: Instant) {
        self.queued.push(Completed { namespace_id, completed_at: now });
    }

    /// The runtime took a batch: everything queued is in it.
    pub(crate) fn batch_taken(&mut self) {
        if self.sending.is_empty() {
            std::mem::swap(&mut self.queued, &mut self.sending);
        } else {
            // Not how the runtime works (one batch in flight), but then the earlier
            // batch's responses are still counted when it ends.
            self.sending.append(&mut self.queued);
        }
    }

    /// The batch was sent at `now`: hands each response's Send time (namespace,
    /// microseconds) to `record`.
    pub(crate) fn batch_sent(&mut self, now: Instant, mut record: impl FnMut(NamespaceId, u64)) {
        for completed in self.sending.drain(..) {
            record(completed.namespace_id, now.saturating_duration_since(completed.completed_at).as_micros() as u64);
        }
    }

    /// The connection closed: responses still queued are never sent.
    pub(crate) fn clear(&mut self) {
        self.queued.clear();
        self.sending.clear();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn each_response_counts_from_its_completion_to_its_batch_being_sent() {
        let start = Instant::now();
        let at = |microseconds| start + Duration::from_micros(microseconds);
        let mut timing = SendTiming::default();
        timing.completed(NamespaceId(1), at(0));
        timing.completed(NamespaceId(2), at(10));
        timing.batch_taken();
        // Completed while the batch is out: goes with the next one.
        timing.completed(NamespaceId(1), at(30));
        let mut recorded = Vec::new();
        timing.batch_sent(at(50), |namespace, microseconds| recorded.push((namespace.0, microseconds)));
        assert_eq!(recorded, vec![(1, 50), (2, 40)]);
        recorded.clear();
        timing.batch_sent(at(60), |namespace, microseconds| recorded.push((namespace.0, microseconds)));
        assert!(recorded.is_empty(), "the later response was not in the sent batch");
        timing.batch_taken();
        timing.batch_sent(at(100), |namespace, microseconds| recorded.push((namespace.0, microseconds)));
        assert_eq!(recorded, vec![(1, 70)]);
    }
}
