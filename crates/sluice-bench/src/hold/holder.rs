//! The one thread's loop over every held controller: bringing them up, `in_flight`
//! at a time, and keeping them alive.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use super::controller::{connect_error_text, HeldController, Setup, Step};
use super::options::HoldOptions;

/// Pause of the loop when a pass over the controllers coming up moved nothing.
const SETUP_IDLE_PAUSE: Duration = Duration::from_micros(100);
/// Longest pause while Keep Alive answers are awaited.
const KEEP_ALIVE_POLL_PAUSE: Duration = Duration::from_millis(1);
/// Longest pause while nothing is awaited (the end of the hold is checked this often).
const IDLE_PAUSE: Duration = Duration::from_millis(100);

/// Every controller, and the one thread's loop over them.
pub(super) struct Holder<'a> {
    options: &'a HoldOptions,
    /// By index; `None` before it is started and after it failed.
    pub(super) controllers: Vec<Option<HeldController>>,
    /// Controllers coming up.
    coming_up: Vec<usize>,
    next_to_start: usize,
    /// Up controllers by when their next Keep Alive is due, soonest first.
    keep_alive_due: BinaryHeap<Reverse<(Instant, usize)>>,
    /// Controllers with a Keep Alive outstanding.
    awaiting: Vec<usize>,
    buffer: Vec<u8>,
    pub(super) up: usize,
    pub(super) reads_ok: usize,
    pub(super) failures: usize,
    pub(super) lost_during_hold: usize,
    pub(super) first_error: Option<String>,
    pub(super) keep_alives_sent: u64,
    pub(super) keep_alives_answered: u64,
    last_progress: Instant,
}

impl<'a> Holder<'a> {
    pub(super) fn new(options: &'a HoldOptions) -> Holder<'a> {
        Holder {
            options,
            controllers: (0..options.controllers).map(|_| None).collect(),
            coming_up: Vec::with_capacity(options.in_flight),
            next_to_start: 0,
            keep_alive_due: BinaryHeap::with_capacity(options.controllers),
            awaiting: Vec::new(),
            buffer: vec![0; 64 * 1024],
            up: 0,
            reads_ok: 0,
            failures: 0,
            lost_during_hold: 0,
            first_error: None,
            keep_alives_sent: 0,
            keep_alives_answered: 0,
            last_progress: Instant::now(),
        }
    }

    fn keep_alive_interval(&self) -> Option<Duration> {
        let kato = self.options.keep_alive_timeout_ms;
        (kato > 0).then(|| Duration::from_millis(u64::from(kato / 2).max(1)))
    }

    fn fail(&mut self, index: usize, error: &str) {
        self.failures += 1;
        self.controllers[index] = None;
        if self.first_error.is_none() {
            self.first_error = Some(format!(
                "controller {} of {} ({}): {error}",
                index + 1,
                self.options.controllers,
                self.options.address
            ));
        }
    }

    /// Starts controllers until `in_flight` are coming up.
    fn start_more(&mut self) {
        while self.coming_up.len() < self.options.in_flight && self.next_to_start < self.options.controllers {
            let index = self.next_to_start;
            self.next_to_start += 1;
            match HeldController::connect(&Setup { options: self.options }, index, Instant::now()) {
                Ok(controller) => {
                    self.controllers[index] = Some(controller);
                    self.coming_up.push(index);
                }
                Err(error) => self.fail(
                    index,
                    &format!("could not connect to {}: {}", self.options.address, connect_error_text(&error)),
                ),
            }
        }
    }

    /// One pass over the controllers coming up; `true` when anything moved.
    fn advance_coming_up(&mut self) -> bool {
        let mut moved = false;
        let mut position = 0;
        while position < self.coming_up.len() {
            let index = self.coming_up[position];
            let setup = Setup { options: self.options };
            let now = Instant::now();
            let Some(controller) = self.controllers[index].as_mut() else {
                self.coming_up.swap_remove(position);
                continue;
            };
            match controller.advance(&setup, &mut self.buffer, now) {
                Ok(step_moved) => {
                    moved |= step_moved;
                    if controller.step == Step::Idle {
                        self.up += 1;
                        self.reads_ok += 1;
                        if let Some(interval) = self.keep_alive_interval() {
                            // Controller i of n first sends at i/n of the interval: spread
                            // evenly, as the keep-alives of hosts that connected at
                            // different times are, not bunched by when these came up.
                            let phase = interval.mul_f64(index as f64 / self.options.controllers as f64);
                            self.keep_alive_due.push(Reverse((now + phase, index)));
                        }
                        self.coming_up.swap_remove(position);
                        continue;
                    }
                }
                Err(error) => {
                    self.fail(index, &error);
                    self.coming_up.swap_remove(position);
                    moved = true;
                    continue;
                }
            }
            position += 1;
        }
        moved
    }

    /// Sends the Keep Alives that are due and reads the answers that came; `true`
    /// when anything moved.
    fn service_keep_alives(&mut self, during_hold: bool) -> bool {
        let Some(interval) = self.keep_alive_interval() else { return false };
        let mut moved = false;
        let now = Instant::now();
        while let Some(&Reverse((due, index))) = self.keep_alive_due.peek() {
            if due > now {
                break;
            }
            self.keep_alive_due.pop();
            let Some(controller) = self.controllers[index].as_mut() else { continue };
            moved = true;
            match controller.send_keep_alive(&mut self.buffer, now) {
                Ok((answered, sent)) => {
                    self.keep_alives_answered += answered;
                    if sent {
                        self.keep_alives_sent += 1;
                        self.awaiting.push(index);
                    }
                    self.keep_alive_due.push(Reverse((now + interval, index)));
                }
                Err(error) => self.lose(index, &error, during_hold),
            }
        }
        let mut position = 0;
        while position < self.awaiting.len() {
            let index = self.awaiting[position];
            let Some(controller) = self.controllers[index].as_mut() else {
                self.awaiting.swap_remove(position);
                continue;
            };
            match controller.idle_service(&mut self.buffer, Instant::now()) {
                Ok(answered) => {
                    self.keep_alives_answered += answered;
                    if !controller.keep_alive_outstanding {
                        moved = true;
                        self.awaiting.swap_remove(position);
                        continue;
                    }
                }
                Err(error) => {
                    self.lose(index, &error, during_hold);
                    self.awaiting.swap_remove(position);
                    continue;
                }
            }
            position += 1;
        }
        moved
    }

    /// An up controller failed.
    fn lose(&mut self, index: usize, error: &str, during_hold: bool) {
        if during_hold {
            self.lost_during_hold += 1;
        }
        self.fail(index, &format!("lost after it was up: {error}"));
    }

    /// A progress line on stderr (with `options.progress`), at most one per `every`.
    fn print_progress(&mut self, every: Duration, text: impl FnOnce(&Self) -> String) {
        if self.options.progress && self.last_progress.elapsed() >= every {
            self.last_progress = Instant::now();
            eprintln!("{}", text(self));
        }
    }

    /// Brings every controller up (or to failure), keeping those already up alive.
    pub(super) fn open(&mut self) {
        loop {
            self.start_more();
            if self.coming_up.is_empty() && self.next_to_start >= self.options.controllers {
                return;
            }
            let moved = self.advance_coming_up() | self.service_keep_alives(false);
            self.print_progress(Duration::from_secs(1), |holder| {
                format!(
                    "hold: {} of {} controllers up, {} coming up, {} failed",
                    holder.up,
                    holder.options.controllers,
                    holder.coming_up.len(),
                    holder.failures
                )
            });
            if !moved {
                std::thread::sleep(SETUP_IDLE_PAUSE);
            }
        }
    }

    /// Keeps every controller alive until `end`.
    pub(super) fn hold_until(&mut self, end: Instant) {
        let started = Instant::now();
        loop {
            let now = Instant::now();
            if now >= end {
                return;
            }
            let moved = self.service_keep_alives(true);
            self.print_progress(Duration::from_secs(10), |holder| {
                format!(
                    "hold: {} controllers held for {} of {} s; keep-alives {} sent, {} answered; {} lost",
                    holder.controllers.iter().flatten().count(),
                    started.elapsed().as_secs(),
                    holder.options.hold.as_secs(),
                    holder.keep_alives_sent,
                    holder.keep_alives_answered,
                    holder.lost_during_hold
                )
            });
            if moved {
                continue;
            }
            let mut pause = if self.awaiting.is_empty() { IDLE_PAUSE } else { KEEP_ALIVE_POLL_PAUSE };
            if let Some(&Reverse((due, _))) = self.keep_alive_due.peek() {
                pause = pause.min(due.saturating_duration_since(now));
            }
            std::thread::sleep(pause.min(end.saturating_duration_since(now)));
        }
    }
}
