//! DH-HMAC-CHAP on the target: a queue's authentication transaction, and the
//! Authentication Send and Receive commands that carry it. Which hosts must
//! authenticate, and with which secrets, is in [`crate::host_access`] (re-exported
//! here under its old path).

use std::borrow::Borrow;
use std::time::Instant;

use nvme_auth::message::MAX_MESSAGE_BYTES;
use nvme_auth::{
    ControllerAuthentication, ControllerCredentials, OsRandom, Progress, SecureChannelContext,
    SECURITY_PROTOCOL_DHCHAP, SECURITY_PROTOCOL_SPECIFIC_DHCHAP,
};
use nvme_spec::fabrics::{AuthenticationCommand, AUTHENTICATION_REQUIRED};
use nvme_spec::opcode::{AdminOpcode, FabricsCommandType};
use nvme_spec::{Status, SubmissionQueueEntry};

use crate::connection::Connection;
use crate::limits::MAX_DATA_TRANSFER_BYTES;
use crate::outcome::Outcome;
use crate::stats::TargetCounters;

/// How long a queue may take from the Connect that asked for authentication to a
/// successful DH-HMAC-CHAP transaction before the connection is closed. An
/// unauthenticated queue holds a socket, slots and a controller without being
/// usable; the Linux host finishes within a second, and 30 s leaves room for
/// ffdhe8192 on a slow (emulated) host. (The connection setup timeout only covers
/// ICReq and Connect.)
pub const AUTHENTICATION_TIMEOUT_MS: u64 = 30_000;

pub use crate::host_access::{HostAccess, HostAccessError, HostEntry, HostVerdict, SharedHostAccess};

/// A queue's DH-HMAC-CHAP state on the target: the transaction and its deadline.
#[derive(Debug)]
pub(crate) struct QueueAuthentication {
    pub(crate) transaction: ControllerAuthentication,
    /// Set once a transaction succeeded; stays set through a re-authentication
    /// (a failed one closes the connection).
    pub(crate) authenticated: bool,
    /// The connection closes unless authenticated by then.
    pub(crate) deadline: Option<Instant>,
}

impl QueueAuthentication {
    /// The state for a queue of `host` (which has a host secret) connected to
    /// `subsystem_nqn` at `now`; `secure_channel` says which concatenation requests
    /// (SC_C) the queue takes.
    pub(crate) fn new(
        host: impl Borrow<HostEntry>,
        subsystem_nqn: &str,
        now: Instant,
        secure_channel: SecureChannelContext,
    ) -> Option<Self> {
        let mut state = Self::authenticated(host, subsystem_nqn, secure_channel)?;
        state.authenticated = false;
        state.deadline = Some(now + std::time::Duration::from_millis(AUTHENTICATION_TIMEOUT_MS));
        Some(state)
    }

    /// The state of a queue that needs no authentication to be used but may run a
    /// transaction (a TLS admin queue over a generated PSK replacing it).
    pub(crate) fn authenticated(
        host: impl Borrow<HostEntry>,
        subsystem_nqn: &str,
        secure_channel: SecureChannelContext,
    ) -> Option<Self> {
        let host = host.borrow();
        let secret = host.dhchap_secret.as_ref()?;
        let credentials =
            ControllerCredentials::new(&host.nqn, subsystem_nqn, secret, host.dhchap_controller_secret.as_ref());
        Some(QueueAuthentication {
            transaction: ControllerAuthentication::new(credentials, host.dhchap_policy.clone(), Box::new(OsRandom))
                .with_secure_channel(secure_channel),
            authenticated: true,
            deadline: None,
        })
    }
}

/// Refuses an Authentication Send/Receive whose SECP, SPSP0, SPSP1 or TL/AL is not
/// DH-HMAC-CHAP's (as Linux does: Invalid Field, do not retry).
fn check_fields(command: &AuthenticationCommand) -> Result<(), Status> {
    let dhchap = command.security_protocol == SECURITY_PROTOCOL_DHCHAP
        && command.security_protocol_specific_0 == SECURITY_PROTOCOL_SPECIFIC_DHCHAP
        && command.security_protocol_specific_1 == SECURITY_PROTOCOL_SPECIFIC_DHCHAP;
    if !dhchap || command.length == 0 {
        return Err(Status::INVALID_FIELD.with_do_not_retry());
    }
    Ok(())
}

impl Connection {
    /// When the queue must be authenticated by: the earliest `handle_timeout` must
    /// run for it.
    pub(crate) fn authentication_deadline(&self) -> Option<Instant> {
        self.authentication.as_ref().filter(|state| !state.authenticated).and_then(|state| state.deadline)
    }

    /// True (once logged) when the queue missed its authentication deadline: the
    /// connection must close.
    pub(crate) fn authentication_timed_out(&mut self, now: Instant) -> bool {
        let Some(deadline) = self.authentication_deadline() else { return false };
        if now < deadline {
            return false;
        }
        tracing::warn!(peer = %self.peer, host = self.host_nqn(), queue = self.queue_number(),
            "DH-HMAC-CHAP authentication not completed in time; closing the connection");
        if let Some(state) = self.authentication.as_mut() {
            state.deadline = None;
        }
        TargetCounters::count(&self.target.counters.authentication_failures);
        true
    }

    fn host_nqn(&self) -> &str {
        self.binding.as_ref().map_or("", |binding| binding.controller.host_nqn.as_str())
    }

    fn queue_number(&self) -> u16 {
        self.binding.as_ref().map_or(0, |binding| binding.queue_id.0)
    }

    /// Runs Authentication Send/Receive, and refuses every other non-Fabrics command
    /// with Authentication Required while the queue is not authenticated. `None`:
    /// the command goes to its usual handler. Property Get/Set, Connect and
    /// Disconnect stay allowed before authentication, as Linux nvmet allows every
    /// Fabrics command.
    pub(crate) fn authentication_gate(&mut self, slot_index: u16) -> Option<Outcome> {
        let sqe = self.slots.slot(slot_index).sqe;
        // Fabrics is opcode 7Fh on the admin and I/O queues alike.
        if sqe.opcode() == AdminOpcode::Fabrics as u8 {
            return match FabricsCommandType::from_u8(sqe.fabrics_command_type()) {
                Some(FabricsCommandType::AuthenticationSend) => Some(self.authentication_send(slot_index, &sqe)),
                Some(FabricsCommandType::AuthenticationReceive) => Some(self.authentication_receive(slot_index, &sqe)),
                _ => None,
            };
        }
        match &self.authentication {
            Some(state) if !state.authenticated => Some(Outcome::status(AUTHENTICATION_REQUIRED.with_do_not_retry())),
            _ => None,
        }
    }

    /// Authentication Send (FCTYPE 05h): TL bytes of in-capsule data hold a message.
    /// A bad message does not fail the command (the next Receive answers with
    /// AUTH_Failure1); only malformed command fields do.
    fn authentication_send(&mut self, slot_index: u16, sqe: &SubmissionQueueEntry) -> Outcome {
        if self.authentication.is_none() {
            self.authentication = self.replacement_authentication().map(Box::new);
        }
        if self.authentication.is_none() {
            // Nothing to authenticate on this queue: the Connect did not ask for it.
            return Outcome::status(Status::COMMAND_SEQUENCE_ERROR.with_do_not_retry());
        }
        let command = AuthenticationCommand::decode(sqe);
        if let Err(status) = check_fields(&command) {
            return Outcome::status(status);
        }
        let length = command.length as usize;
        if length > MAX_MESSAGE_BYTES {
            return Outcome::status(Status::INVALID_FIELD.with_do_not_retry());
        }
        // Messages are small (at most a few KiB): they always ride in the capsule.
        let slot = self.slots.slot(slot_index);
        let Some(message) = slot.buffer.get(..length).filter(|_| slot.host_data_bytes as usize == length) else {
            return Outcome::status(Status::DATA_SGL_LENGTH_INVALID.with_do_not_retry());
        };
        let Some(state) = self.authentication.as_mut() else {
            return Outcome::status(Status::COMMAND_SEQUENCE_ERROR.with_do_not_retry());
        };
        let progress = state.transaction.on_send(message);
        self.authentication_progress(progress);
        Outcome::status(Status::SUCCESS)
    }

    /// Authentication Receive (FCTYPE 06h): the next message, padded with zeros to
    /// AL bytes (as Linux sends it).
    fn authentication_receive(&mut self, slot_index: u16, sqe: &SubmissionQueueEntry) -> Outcome {
        if self.authentication.is_none() {
            return Outcome::status(Status::COMMAND_SEQUENCE_ERROR.with_do_not_retry());
        }
        let command = AuthenticationCommand::decode(sqe);
        if let Err(status) = check_fields(&command) {
            return Outcome::status(status);
        }
        if command.length > MAX_DATA_TRANSFER_BYTES {
            return Outcome::status(Status::INVALID_FIELD.with_do_not_retry());
        }
        let sgl = sqe.sgl();
        if !sgl.is_transport() {
            return Outcome::status(Status::SGL_DESCRIPTOR_TYPE_INVALID.with_do_not_retry());
        }
        if sgl.length != command.length {
            return Outcome::status(Status::DATA_SGL_LENGTH_INVALID.with_do_not_retry());
        }
        let Some(state) = self.authentication.as_mut() else {
            return Outcome::status(Status::COMMAND_SEQUENCE_ERROR.with_do_not_retry());
        };
        let allocation_length = command.length as usize;
        let (message, progress) = match state.transaction.on_receive(allocation_length) {
            Ok(answer) => answer,
            Err(error) => {
                tracing::debug!(peer = %self.peer, %error, "Authentication Receive refused");
                return Outcome::status(Status::INVALID_FIELD.with_do_not_retry());
            }
        };
        let mut buffer = self.pool.take_zeroed(allocation_length);
        // `on_receive` refuses an allocation length shorter than its message.
        debug_assert!(message.len() <= buffer.len());
        for (byte, sent) in buffer.iter_mut().zip(&message) {
            *byte = *sent;
        }
        self.slots.slot(slot_index).buffer = buffer;
        self.authentication_progress(progress);
        Outcome::Data(command.length)
    }

    /// A TLS admin queue over a PSK the host generated needed no authentication at
    /// Connect; the host may still authenticate there to replace its PSK
    /// (REPLACETLSPSK). The queue stays usable meanwhile; a failed transaction
    /// closes it like any other.
    fn replacement_authentication(&self) -> Option<QueueAuthentication> {
        let binding = self.binding.as_ref().filter(|binding| binding.queue_id.is_admin())?;
        self.secure_channel.as_ref().filter(|channel| channel.generated)?;
        let subsystem = binding.controller.subsystem.as_ref()?;
        let rules = subsystem.hosts.current();
        let entry = rules.entry(&binding.controller.host_nqn).filter(|entry| entry.concat)?;
        let context = SecureChannelContext { allowed: true, admin_queue: true, on_tls: true };
        QueueAuthentication::authenticated(entry, &subsystem.nqn, context)
    }

    /// Acts on where the transaction got: success lifts the gate, failure closes
    /// the connection once the response is out (Linux makes the controller fatal).
    fn authentication_progress(&mut self, progress: Progress) {
        let Some(state) = self.authentication.as_mut() else { return };
        match progress {
            Progress::InProgress => {}
            Progress::Authenticated => {
                state.authenticated = true;
                state.deadline = None;
                TargetCounters::count(&self.target.counters.authentication_successes);
                let negotiated = state.transaction.negotiated();
                let generated = state.transaction.take_generated_psk();
                tracing::info!(peer = %self.peer, host = self.host_nqn(), queue = self.queue_number(),
                    hash = negotiated.map_or("", |n| n.hash.name()),
                    dhgroup = negotiated.map_or("", |n| n.group.name()),
                    bidirectional = negotiated.is_some_and(|n| n.bidirectional),
                    secure_channel = ?negotiated.map(|n| n.secure_channel),
                    "DH-HMAC-CHAP authentication succeeded");
                if let Some(generated) = generated {
                    self.file_generated_psk(&generated);
                }
            }
            Progress::Failed(reason) => {
                TargetCounters::count(&self.target.counters.authentication_failures);
                tracing::warn!(peer = %self.peer, host = self.host_nqn(), queue = self.queue_number(), ?reason,
                    "DH-HMAC-CHAP authentication failed; closing the connection");
                self.phase_after_response_closing();
            }
        }
    }

    /// Files a PSK the host's transaction generated where its TLS handshakes find it.
    fn file_generated_psk(&mut self, generated: &nvme_auth::GeneratedPsk) {
        let Some(binding) = self.binding.as_ref() else { return };
        let Some(subsystem) = binding.controller.subsystem.as_ref() else { return };
        let host_nqn = binding.controller.host_nqn.clone();
        match self.target.generated_psks.insert(generated, &host_nqn, &subsystem.nqn) {
            Ok(identity) => tracing::info!(peer = %self.peer, host = %host_nqn, subsystem = %subsystem.nqn,
                %identity, "secure channel concatenation: TLS PSK generated; the host reconnects over TLS with it"),
            Err(error) => tracing::warn!(peer = %self.peer, host = %host_nqn, %error,
                "secure channel concatenation: no TLS PSK could be derived"),
        }
    }
}
