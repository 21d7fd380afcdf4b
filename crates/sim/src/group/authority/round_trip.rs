//! The cluster's side of one change's round trip: watches registered, changes applied
//! in arrival order, each accepted change published to every registered watch,
//! notices delivered (or lost), and publications answered once every watcher
//! acknowledged or the lease passed, fencing the silent, those without a watch (on a
//! preempting change) and, past its own fence's bound, the notifier itself. The
//! types and the world's API are in the parent module.

use std::collections::{BTreeMap, BTreeSet};

use nvme_spec::Status;
use nvme_target::group_reservations::{AppliedChange, ChangeTicket, MAX_KEPT_NOTICES};
use nvme_target::reservations::{Notice, ReservationState};

use super::{
    fenced_answer_delay_ns, host_of, ClusterState, Commit, Delivery, FenceCause, FenceRecord, GatewayAction, Loss,
    Publication,
};

impl ClusterState {
    pub(super) fn notice_delay(&mut self) -> u64 {
        self.rng.between(10_000, self.faults.notice_delay_max_ns)
    }

    /// Broken or new watches due: registered, then the record is read and installed.
    pub(super) fn register_watches(&mut self, now_ns: u64) {
        for gateway in 0..self.watches.len() {
            let watch = self.watches[gateway];
            let (Some(instance), Some(at)) = (watch.instance, watch.register_at_ns) else {
                continue;
            };
            if at > now_ns || self.fenced[gateway] {
                continue;
            }
            if let Some(until_ns) = self.watches[gateway].forget_until_ns.take() {
                if now_ns < until_ns {
                    self.forget_without_persistence(now_ns, instance);
                    self.forgot.insert(instance);
                }
            }
            self.watches[gateway].registered = true;
            self.watches[gateway].register_at_ns = None;
            self.watches[gateway].epoch += 1;
            let at_ns = now_ns + self.notice_delay();
            self.deliveries.push(Delivery {
                gateway,
                instance,
                update: self.record.clone(),
                at_ns,
                epoch: self.watches[gateway].epoch,
                loss: Loss::Nothing,
                publication: None,
            });
        }
    }

    /// The group's power loss: with PTPL off, registrations and reservation go (PRGEN
    /// counts on), written and announced like any change.
    pub(super) fn forget_without_persistence(&mut self, now_ns: u64, instance: u64) {
        let current = &self.record.state;
        if current.persist_through_power_loss || (current.registrants.is_empty() && current.holder.is_none()) {
            return;
        }
        let generation = current.generation.wrapping_add(1);
        self.power_loss_clears += 1;
        self.record.sequence += 1;
        self.record.state = ReservationState { generation, ..ReservationState::default() };
        self.commits.push(Commit {
            instance,
            call: 0,
            host: None,
            change: None,
            status: Status::SUCCESS,
            sequence: self.record.sequence,
            update: self.record.clone(),
        });
        let answer = AppliedChange { status: Status::SUCCESS, update: self.record.clone() };
        self.publish(now_ns, None, answer, None, false);
    }

    /// Changes whose round trip is over, one at a time in the order they arrive.
    pub(super) fn apply_requests(&mut self, now_ns: u64) {
        loop {
            let Some(position) = self
                .requests
                .iter()
                .enumerate()
                .filter(|(_, request)| request.ready_at_ns <= now_ns)
                .min_by_key(|(index, request)| (request.ready_at_ns, *index))
                .map(|(index, _)| index)
            else {
                return;
            };
            let request = self.requests.remove(position);
            if self.fenced[request.gateway] {
                request.done.finish(Err("this gateway is blocklisted".into()));
                continue;
            }
            let mut state = self.record.state.clone();
            let mut preempts = false;
            let status = match request.change.apply(&mut state) {
                Ok(effects) => {
                    preempts = effects.notices.iter().any(|(_, notice)| *notice == Notice::RegistrationPreempted);
                    self.record.sequence += 1;
                    self.record.state = state;
                    let sequence = self.record.sequence;
                    self.record.notices.extend(effects.notices.iter().map(|(host, notice)| (sequence, *host, *notice)));
                    let excess = self.record.notices.len().saturating_sub(MAX_KEPT_NOTICES);
                    self.record.notices.drain(..excess);
                    Status::SUCCESS
                }
                Err(status) => status,
            };
            self.commits.push(Commit {
                instance: request.instance,
                call: request.call,
                host: host_of(&request.change),
                change: Some(request.change),
                status,
                sequence: self.record.sequence,
                update: self.record.clone(),
            });
            let answer = AppliedChange { status, update: self.record.clone() };
            if !status.is_success() {
                // Refused from the state read: nothing written, nobody notified.
                request.done.finish(Ok(answer));
                continue;
            }
            self.publish(now_ns, Some(request.done), answer, Some((request.gateway, request.instance)), preempts);
        }
    }

    /// Notifies every registered watch of the record (`answer`'s), each after its own
    /// delay; `done` is finished once all acknowledged or the lease passed.
    pub(super) fn publish(
        &mut self,
        now_ns: u64,
        done: Option<ChangeTicket>,
        answer: AppliedChange,
        notifier: Option<(usize, u64)>,
        preempts: bool,
    ) {
        let id = self.next_publication;
        self.next_publication += 1;
        let mut waiting = BTreeSet::new();
        let mut lost = BTreeMap::new();
        for gateway in 0..self.watches.len() {
            let watch = self.watches[gateway];
            let Some(instance) = watch.instance.filter(|_| watch.registered) else {
                continue;
            };
            waiting.insert((gateway, instance));
            let at_ns = now_ns + self.notice_delay();
            let loss = if !self.rng.chance(self.faults.lost_notice_per_million) {
                Loss::Nothing
            } else if self.rng.chance(500_000) {
                lost.insert((gateway, instance), FenceCause::NoticeLost);
                Loss::Notice
            } else {
                lost.insert((gateway, instance), FenceCause::AcknowledgementLost);
                Loss::Acknowledgement
            };
            self.deliveries.push(Delivery {
                gateway,
                instance,
                update: self.record.clone(),
                at_ns,
                epoch: watch.epoch,
                loss,
                publication: Some(id),
            });
        }
        self.publications.insert(
            id,
            Publication {
                done,
                answer,
                waiting,
                committed_ns: now_ns,
                deadline_ns: now_ns + self.faults.lease_ns,
                lost,
                restarted: false,
                acknowledged: BTreeSet::new(),
                notifier,
                preempts,
                awaiting_own_fence: false,
                vouch_wait_from_ns: None,
                answer_at_ns: None,
            },
        );
    }

    /// Notices and loads due: installed (the world acknowledges them) unless lost or
    /// the watch is gone.
    pub(super) fn deliver(&mut self, now_ns: u64) {
        let mut index = 0;
        while index < self.deliveries.len() {
            if self.deliveries[index].at_ns > now_ns {
                index += 1;
                continue;
            }
            let delivery = self.deliveries.remove(index);
            let watch = self.watches[delivery.gateway];
            if watch.instance != Some(delivery.instance)
                || !watch.registered
                || watch.epoch != delivery.epoch
                || self.fenced[delivery.gateway]
            {
                continue;
            }
            let key = (delivery.gateway, delivery.instance);
            if delivery.loss == Loss::Notice {
                self.lost_notices += 1;
                if self.canary_missed_notice {
                    // The planted bug: acknowledged without installing.
                    if let Some(publication) = delivery.publication.and_then(|id| self.publications.get_mut(&id)) {
                        if publication.waiting.remove(&key) {
                            publication.acknowledged.insert(key);
                        }
                    }
                }
                continue;
            }
            let acknowledgement_lost = delivery.loss == Loss::Acknowledgement;
            if acknowledgement_lost {
                self.lost_notices += 1;
            }
            self.actions.push(GatewayAction::Install {
                gateway: delivery.gateway,
                instance: delivery.instance,
                update: delivery.update,
                publication: delivery.publication,
                acknowledgement_lost,
            });
        }
    }

    /// Publications every watcher acknowledged are answered; past the lease, silent
    /// live gateways are fenced first.
    pub(super) fn answer(&mut self, now_ns: u64) {
        let ids: Vec<u64> = self.publications.keys().copied().collect();
        for id in ids {
            let publication = &self.publications[&id];
            if let Some(at_ns) = publication.answer_at_ns {
                if at_ns <= now_ns {
                    if let Some(done) = self
                        .publications
                        .remove(&id)
                        .and_then(|settled| settled.done.map(|done| (done, settled.answer)))
                    {
                        done.0.finish(Ok(done.1));
                    }
                }
                continue;
            }
            if publication.awaiting_own_fence || (!publication.waiting.is_empty() && publication.deadline_ns > now_ns) {
                continue;
            }
            let Some(mut publication) = self.publications.remove(&id) else {
                continue;
            };
            let fences_before = self.fences;
            for &(gateway, instance) in &publication.waiting {
                let alive = self.watches[gateway].instance == Some(instance);
                if alive && !self.fenced[gateway] {
                    let cause = match publication.lost.get(&(gateway, instance)) {
                        Some(&cause) => cause,
                        None if publication.restarted => FenceCause::ClusterRestarted,
                        None => FenceCause::Silent,
                    };
                    self.fence_records.push(FenceRecord {
                        gateway,
                        instance,
                        publication: id,
                        sequence: publication.answer.update.sequence,
                        committed_ns: publication.committed_ns,
                        cause,
                    });
                    self.fence(gateway, instance);
                }
            }
            // Live gateways that neither acknowledged nor were silent: their watch was
            // lost (or registered only after the notify went out), or they were
            // fenced already (a blocklisted client's watch is gone).
            let unanswered: Vec<(usize, u64)> = (0..self.watches.len())
                .filter_map(|gateway| {
                    let key = (gateway, self.watches[gateway].instance?);
                    let answered = publication.notifier.is_some_and(|(notifier, _)| notifier == gateway)
                        || publication.acknowledged.contains(&key)
                        || publication.waiting.contains(&key);
                    (!answered).then_some(key)
                })
                .collect();
            if publication.preempts {
                // Writes they had already sent for the preempted host were not waited
                // for.
                for &(gateway, instance) in &unanswered {
                    if self.fenced[gateway] {
                        continue;
                    }
                    self.fence_records.push(FenceRecord {
                        gateway,
                        instance,
                        publication: id,
                        sequence: publication.answer.update.sequence,
                        committed_ns: publication.committed_ns,
                        cause: FenceCause::NoWatch,
                    });
                    self.fence(gateway, instance);
                }
            }
            // A fenced gateway, or one that lost its watch, may answer from its old copy
            // until it learns so or its vouch runs out: the change is answered after
            // that bound.
            if self.fences > fences_before || !unanswered.is_empty() {
                publication.vouch_wait_from_ns = Some(now_ns);
            }
            // The notifier's own notice went unacknowledged: nobody waited for its
            // writes of the preempted hosts; it waits for them itself.
            if let Some((gateway, instance)) = publication.notifier.filter(|&(gateway, instance)| {
                publication.preempts
                    && !self.fenced[gateway]
                    && self.watches[gateway].instance == Some(instance)
                    && !publication.acknowledged.contains(&(gateway, instance))
            }) {
                self.actions.push(GatewayAction::OwnFence {
                    gateway,
                    instance,
                    publication: id,
                    update: publication.answer.update.clone(),
                });
                publication.awaiting_own_fence = true;
                publication.waiting.clear();
                self.publications.insert(id, publication);
                continue;
            }
            self.answer_or_delay(now_ns, id, publication);
        }
    }

    /// Answers a settled publication now, or, when it fenced other gateways, once
    /// their vouch ran out ([`fenced_answer_delay_ns`] after the fence).
    pub(super) fn answer_or_delay(&mut self, now_ns: u64, id: u64, mut publication: Publication) {
        let at_ns = publication
            .vouch_wait_from_ns
            .filter(|_| !self.canary_no_copy_vouch)
            .map_or(0, |fenced_ns| fenced_ns + fenced_answer_delay_ns(self.faults.lease_ns));
        if at_ns > now_ns {
            publication.answer_at_ns = Some(at_ns);
            self.publications.insert(id, publication);
        } else if let Some(done) = publication.done {
            done.finish(Ok(publication.answer));
        }
    }

    pub(super) fn fence(&mut self, gateway: usize, instance: u64) {
        self.fences += 1;
        self.fenced[gateway] = true;
        self.watches[gateway].registered = false;
        self.watches[gateway].register_at_ns = None;
        for publication in self.publications.values_mut() {
            publication.waiting.remove(&(gateway, instance));
        }
        self.actions.push(GatewayAction::Fence { gateway, instance });
    }
}
