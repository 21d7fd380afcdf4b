//! The timeline of each path change this gateway made as the new owner of an ANA
//! group (a takeover, a drain's or a balancing move's hand-over, a failback): when the
//! change started (the move decided, or the group noticed ownerless), when the old
//! owner let go, when the fence landed, when the group turned optimized here, and for
//! each host controller: when it got the ANA change notice, read the ANA log, and
//! sent its first command for the group on this path. The last
//! [`PATH_CHANGES_KEPT`] are in `gateway status`; the metrics keep histograms.
//!
//! Times are milliseconds from the change's start. A move's start is its decision
//! (Unix time in the placement record, possibly on another member: the members'
//! clocks are assumed in step, as Ceph itself assumes); a takeover's start is the old
//! owner's last renewal, estimated as a lease before this gateway saw the group
//! without an owner (its lock expired a lease after that renewal, and this gateway
//! looks every quarter lease: the estimate is early by up to a quarter lease).

use std::collections::VecDeque;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use nvme_spec::ana::AnaGroupId;

/// Path changes kept for `gateway status`.
pub const PATH_CHANGES_KEPT: usize = 32;
/// A change stops waiting for host controllers' first commands after this long: a
/// host with no I/O for the group never sends one.
pub const FIRST_COMMAND_WAIT: Duration = Duration::from_secs(30);
/// Histogram buckets of the path change metrics, in seconds.
pub const HISTOGRAM_BUCKETS_SECONDS: [f64; 10] = [0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0];

/// What moved the group.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChangeKind {
    /// The owner was lost (died, cut off or stopped): taken, fencing it.
    Takeover,
    /// Handed over because its owner was drained.
    Drain,
    /// Handed over by a balancing pass.
    Rebalance,
    /// Handed back to its preferred member.
    Failback,
    /// Handed over because its owner stopped (SIGTERM).
    Stop,
    /// Moved by an operator (`gateway_move`).
    Move,
}

impl ChangeKind {
    pub const ALL: [ChangeKind; 6] = [
        ChangeKind::Takeover,
        ChangeKind::Drain,
        ChangeKind::Rebalance,
        ChangeKind::Failback,
        ChangeKind::Stop,
        ChangeKind::Move,
    ];

    pub const fn name(self) -> &'static str {
        match self {
            ChangeKind::Takeover => "takeover",
            ChangeKind::Drain => "drain",
            ChangeKind::Rebalance => "rebalance",
            ChangeKind::Failback => "failback",
            ChangeKind::Stop => "stop",
            ChangeKind::Move => "move",
        }
    }
}

/// One host controller's part of a change.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ControllerTimeline {
    pub controller_id: u16,
    pub host_nqn: String,
    pub notice_ms: Option<u64>,
    pub log_read_ms: Option<u64>,
    pub first_command_ms: Option<u64>,
}

/// What the target reports for one controller (see `nvme_target::path_watch`).
#[derive(Clone, Debug)]
pub struct ControllerPath {
    pub controller_id: u16,
    pub host_nqn: String,
    pub events: nvme_target::path_watch::PathEvents,
}

/// One change.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PathChange {
    pub ana_group: u32,
    pub kind: ChangeKind,
    /// The previous owner ("" when unknown).
    pub from: String,
    pub to: String,
    pub reason: String,
    /// The start (Unix time, ms).
    pub started_unix_ms: u64,
    /// The previous owner released the group (a hand-over) ...
    pub released_ms: Option<u64>,
    /// ... or was fenced (a takeover).
    pub fenced_ms: Option<u64>,
    /// Optimized here.
    pub optimized_ms: u64,
    /// No member had the group optimized from `released_ms` (or the start) until
    /// `optimized_ms`.
    pub without_optimized_ms: u64,
    pub controllers: Vec<ControllerTimeline>,
    /// The last controller's first command ("" until every controller sent one or
    /// the wait ended).
    pub last_first_command_ms: Option<u64>,
    /// Still collecting controllers' first commands.
    pub open: bool,
    #[serde(skip)]
    optimized_at: Option<Instant>,
}

pub fn unix_ms(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).map_or(0, |since| since.as_millis() as u64)
}

/// A histogram in the Prometheus layout (cumulative buckets).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Histogram {
    pub buckets: [u64; HISTOGRAM_BUCKETS_SECONDS.len()],
    pub count: u64,
    pub sum_seconds: f64,
}

impl Histogram {
    pub fn observe(&mut self, seconds: f64) {
        for (bucket, bound) in self.buckets.iter_mut().zip(HISTOGRAM_BUCKETS_SECONDS) {
            if seconds <= bound {
                *bucket += 1;
            }
        }
        self.count += 1;
        self.sum_seconds += seconds;
    }
}

/// The kept changes and the histograms.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Timelines {
    pub changes: VecDeque<PathChange>,
    /// Per kind: time without an optimized path.
    pub without_optimized: Vec<(ChangeKind, Histogram)>,
    /// Per kind: start to the last controller's first command.
    pub to_last_first_command: Vec<(ChangeKind, Histogram)>,
    pub counts: Vec<(ChangeKind, u64)>,
}

/// What the coordinator knows of a change when the group turns optimized here.
pub struct ChangeStart {
    pub ana_group: AnaGroupId,
    pub kind: ChangeKind,
    pub from: String,
    pub to: String,
    pub reason: String,
    pub started_unix_ms: u64,
    pub released_unix_ms: Option<u64>,
    pub fenced_unix_ms: Option<u64>,
}

fn observe(list: &mut Vec<(ChangeKind, Histogram)>, kind: ChangeKind, seconds: f64) {
    match list.iter_mut().find(|(known, _)| *known == kind) {
        Some((_, histogram)) => histogram.observe(seconds),
        None => {
            let mut histogram = Histogram::default();
            histogram.observe(seconds);
            list.push((kind, histogram));
        }
    }
}

impl Timelines {
    /// A change finished here: the group is optimized as of `now` / `now_unix_ms`.
    pub fn record(&mut self, start: ChangeStart, now: Instant, now_unix_ms: u64) {
        let since = |unix_ms: u64| unix_ms.saturating_sub(start.started_unix_ms);
        let optimized_ms = since(now_unix_ms);
        let without_optimized_ms = now_unix_ms.saturating_sub(start.released_unix_ms.unwrap_or(start.started_unix_ms));
        observe(&mut self.without_optimized, start.kind, without_optimized_ms as f64 / 1000.0);
        match self.counts.iter_mut().find(|(kind, _)| *kind == start.kind) {
            Some((_, count)) => *count += 1,
            None => self.counts.push((start.kind, 1)),
        }
        self.changes.push_back(PathChange {
            ana_group: start.ana_group.0,
            kind: start.kind,
            from: start.from,
            to: start.to,
            reason: start.reason,
            started_unix_ms: start.started_unix_ms,
            released_ms: start.released_unix_ms.map(since),
            fenced_ms: start.fenced_unix_ms.map(since),
            optimized_ms,
            without_optimized_ms,
            controllers: Vec::new(),
            last_first_command_ms: None,
            open: true,
            optimized_at: Some(now),
        });
        while self.changes.len() > PATH_CHANGES_KEPT {
            self.changes.pop_front();
        }
    }

    /// Fills the open changes of `group` from the controllers' events; closes those
    /// whose every controller sent its first command, or whose wait ended.
    pub fn update(&mut self, group: AnaGroupId, paths: &[ControllerPath], now: Instant) {
        for change in self.changes.iter_mut().filter(|change| change.open && change.ana_group == group.0) {
            let Some(optimized_at) = change.optimized_at else { continue };
            // Instants before the state change map onto the timeline through it.
            let offset = |at: Instant| -> u64 {
                if at >= optimized_at {
                    change.optimized_ms + at.duration_since(optimized_at).as_millis() as u64
                } else {
                    change.optimized_ms.saturating_sub(optimized_at.duration_since(at).as_millis() as u64)
                }
            };
            let started_at =
                optimized_at.checked_sub(Duration::from_millis(change.optimized_ms)).unwrap_or(optimized_at);
            // Only controllers that use the group: the others never send it a command.
            change.controllers = paths
                .iter()
                .filter(|path| path.events.used(group))
                .map(|path| {
                    let first = path
                        .events
                        .groups
                        .iter()
                        .find(|(known, changed, _)| *known == group && *changed >= optimized_at)
                        .and_then(|(_, _, first)| *first);
                    ControllerTimeline {
                        controller_id: path.controller_id,
                        host_nqn: path.host_nqn.clone(),
                        notice_ms: path.events.ana_notice_sent.filter(|at| *at >= started_at).map(offset),
                        log_read_ms: path.events.ana_log_read.filter(|at| *at >= started_at).map(offset),
                        first_command_ms: first.map(offset),
                    }
                })
                .collect();
            let all_sent = change.controllers.iter().all(|controller| controller.first_command_ms.is_some());
            if all_sent || now.duration_since(optimized_at) >= FIRST_COMMAND_WAIT {
                change.open = false;
                change.last_first_command_ms =
                    change.controllers.iter().filter_map(|controller| controller.first_command_ms).max();
                if let Some(last) = change.last_first_command_ms {
                    observe(&mut self.to_last_first_command, change.kind, last as f64 / 1000.0);
                }
            }
        }
    }

    /// ANA groups with changes still collecting.
    pub fn open_groups(&self) -> Vec<AnaGroupId> {
        let mut groups: Vec<AnaGroupId> =
            self.changes.iter().filter(|change| change.open).map(|change| AnaGroupId(change.ana_group)).collect();
        groups.sort_by_key(|group| group.0);
        groups.dedup();
        groups
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvme_target::path_watch::PathEvents;

    #[test]
    fn a_change_collects_each_controllers_notice_and_first_command_then_closes() {
        let mut timelines = Timelines::default();
        let optimized = Instant::now();
        timelines.record(
            ChangeStart {
                ana_group: AnaGroupId(2),
                kind: ChangeKind::Drain,
                from: "a".into(),
                to: "b".into(),
                reason: "drain of a".into(),
                started_unix_ms: 10_000,
                released_unix_ms: Some(10_300),
                fenced_unix_ms: None,
            },
            optimized,
            10_700,
        );
        let change = &timelines.changes[0];
        assert_eq!((change.optimized_ms, change.released_ms, change.without_optimized_ms), (700, Some(300), 400));
        assert_eq!(timelines.open_groups(), vec![AnaGroupId(2)]);
        let path = |id, first: Option<Instant>| ControllerPath {
            controller_id: id,
            host_nqn: "h".into(),
            events: PathEvents {
                ana_notice_sent: Some(optimized + Duration::from_millis(5)),
                ana_log_read: Some(optimized + Duration::from_millis(8)),
                groups: vec![(AnaGroupId(2), optimized, first)],
                groups_used: 1 << 1,
            },
        };
        let later = optimized + Duration::from_millis(50);
        timelines.update(AnaGroupId(2), &[path(1, Some(later)), path(2, None)], later);
        assert!(timelines.changes[0].open, "controller 2 has not sent yet");
        assert_eq!(timelines.changes[0].controllers[0].notice_ms, Some(705));
        timelines.update(AnaGroupId(2), &[path(1, Some(later)), path(2, Some(later))], later);
        let change = &timelines.changes[0];
        assert!(!change.open);
        assert_eq!(change.last_first_command_ms, Some(750));
        assert_eq!(timelines.to_last_first_command[0].1.count, 1);
        assert_eq!(timelines.without_optimized[0].1.buckets[2], 0, "0.4 s is above the 0.25 s bucket");
        assert_eq!(timelines.without_optimized[0].1.buckets[3], 1);
    }

    #[test]
    fn only_the_newest_changes_are_kept() {
        let mut timelines = Timelines::default();
        for index in 0..(PATH_CHANGES_KEPT as u64 + 5) {
            let start = ChangeStart {
                ana_group: AnaGroupId(1),
                kind: ChangeKind::Takeover,
                from: String::new(),
                to: "a".into(),
                reason: String::new(),
                started_unix_ms: index,
                released_unix_ms: None,
                fenced_unix_ms: Some(index),
            };
            timelines.record(start, Instant::now(), index + 1);
        }
        assert_eq!(timelines.changes.len(), PATH_CHANGES_KEPT);
        assert_eq!(timelines.changes[0].started_unix_ms, 5);
        assert_eq!(timelines.counts, vec![(ChangeKind::Takeover, PATH_CHANGES_KEPT as u64 + 5)]);
    }
}
