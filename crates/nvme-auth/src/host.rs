//! The host side of one queue's DH-HMAC-CHAP transaction: which Authentication
//! Send / Receive command to issue next, given how the previous one ended.
//!
//! ```text
//! start --> Send(Negotiate) --Sent--> Receive --Challenge--> Send(Reply) --Sent--> Receive
//!      --Success1 (R2 checked when asked)--> [Send(Success2) --Sent-->] Authenticated
//! Failure1 received -> Failed;  a problem on our side -> Send(Failure2) --Sent--> Failed
//! a command completing with an error status -> Failed
//! ```

use zeroize::Zeroizing;

use crate::concat::{GeneratedPsk, SecureChannelRequest};
use crate::group::{DhGroup, EphemeralKey};
use crate::hash::{DigestValue, HashFunction};
use crate::message::{
    DecodeError, Failure, FailureReason, Message, Negotiate, ProtocolDescriptor, Reply, DHCHAP_AUTH_ID,
    MAX_MESSAGE_BYTES,
};
use crate::random::RandomSource;
use crate::response::{controller_response, host_response, ResponseInput};
use crate::secret::Secret;

/// AL of every Authentication Receive the host issues: Linux's 4 KiB, enough for
/// the largest message.
pub const RECEIVE_ALLOCATION_BYTES: u32 = MAX_MESSAGE_BYTES as u32;

/// What the host offers in AUTH_Negotiate, most preferred first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostPolicy {
    /// Hash functions offered.
    pub hashes: Vec<HashFunction>,
    /// DH groups offered.
    pub groups: Vec<DhGroup>,
}

impl Default for HostPolicy {
    /// Everything, in Linux's order: the controller chooses.
    fn default() -> Self {
        HostPolicy { hashes: HashFunction::ALL.to_vec(), groups: DhGroup::ALL.to_vec() }
    }
}

/// The host's identity and secrets for one subsystem.
#[derive(Clone, PartialEq, Eq)]
pub struct HostCredentials {
    /// NQNh.
    pub host_nqn: String,
    /// NQNc.
    pub subsystem_nqn: String,
    /// The host's secret (`--dhchap-secret`).
    pub secret: Secret,
    /// The controller's secret (`--dhchap-ctrl-secret`): when set, the host asks the
    /// controller to prove it knows it.
    pub controller_secret: Option<Secret>,
}

impl std::fmt::Debug for HostCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostCredentials")
            .field("host_nqn", &self.host_nqn)
            .field("subsystem_nqn", &self.subsystem_nqn)
            .field("secret", &self.secret)
            .field("controller_secret", &self.controller_secret)
            .finish()
    }
}

/// The next thing the host must do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostStep {
    /// Issue Authentication Send with this payload (TL = its length).
    Send(Vec<u8>),
    /// Issue Authentication Receive with this AL.
    Receive(u32),
    /// Done: the queue is authenticated.
    Authenticated,
    /// Done: authentication failed; the queue is unusable.
    Failed(HostAuthError),
}

/// How the previous Authentication Send / Receive ended.
#[derive(Clone, Copy, Debug)]
pub enum CommandResult<'a> {
    /// The Send completed successfully.
    Sent,
    /// The Receive completed successfully with this data.
    Received(&'a [u8]),
    /// The command completed with this NVMe status field (SCT/SC/DNR, nonzero).
    Status(u16),
}

/// Why authentication failed, from the host's point of view.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HostAuthError {
    /// The controller refused us with AUTH_Failure1 (a wrong secret shows up here
    /// as explanation 01h, "authentication failed").
    #[error("the controller refused authentication (AUTH_Failure1, explanation {explanation:#04x}: {})", explain(*explanation))]
    Refused {
        /// REASON CODE EXPLANATION.
        explanation: u8,
    },
    /// The controller's response R2 did not match: it does not know the controller
    /// secret we hold.
    #[error("the controller failed to authenticate itself (wrong controller secret?)")]
    ControllerNotAuthenticated,
    /// The controller chose something we did not offer, or sent an unusable value.
    #[error("the controller's challenge is unusable: {0:?}")]
    Unusable(FailureReason),
    /// A message from the controller could not be decoded.
    #[error("the controller sent a malformed authentication message: {0}")]
    Malformed(DecodeError),
    /// A message arrived out of sequence.
    #[error("the controller sent {received} where {expected} was expected")]
    UnexpectedMessage {
        /// What arrived.
        received: &'static str,
        /// What was expected.
        expected: &'static str,
    },
    /// An Authentication Send or Receive completed with an error status.
    #[error("an authentication command failed with status field {status:#06x}")]
    CommandFailed {
        /// The status field (SC bits 7:0, SCT bits 10:8, DNR bit 14).
        status: u16,
    },
    /// No random numbers were available.
    #[error("no random numbers available for the challenge")]
    Random,
}

fn explain(code: u8) -> &'static str {
    match FailureReason::from_code(code) {
        Some(FailureReason::Failed) => "authentication failed: wrong secret?",
        Some(FailureReason::ProtocolNotUsable) => "protocol not usable",
        Some(FailureReason::ConcatenationMismatch) => "secure channel concatenation mismatch",
        Some(FailureReason::HashUnusable) => "no common hash function",
        Some(FailureReason::DhGroupUnusable) => "no common DH group",
        Some(FailureReason::IncorrectPayload) => "incorrect payload",
        Some(FailureReason::IncorrectMessage) => "incorrect message",
        None => "reserved",
    }
}

/// What the host needs between its Reply and the controller's Success1.
struct Pending {
    hash: HashFunction,
    /// R2 the controller must return, when we asked for it.
    expected_controller_response: Option<DigestValue>,
    /// The PSK this transaction generates (secure channel concatenation), handed out
    /// once the controller accepted R1.
    generated: Option<GeneratedPsk>,
}

enum State {
    Start,
    NegotiateSent,
    AwaitingChallenge,
    ReplySent(Pending),
    AwaitingSuccess1(Pending),
    Success2Sent(Option<GeneratedPsk>),
    Failure2Sent(HostAuthError),
    Finished(Result<(), HostAuthError>),
}

/// The host's side of DH-HMAC-CHAP on one queue. See the module docs.
pub struct HostAuthentication {
    credentials: HostCredentials,
    policy: HostPolicy,
    random: Box<dyn RandomSource>,
    transaction_id: u16,
    state: State,
    /// SC_C sent in AUTH_Negotiate.
    secure_channel: SecureChannelRequest,
    /// The PSK the transaction generated, once authenticated and until taken.
    generated: Option<GeneratedPsk>,
}

impl std::fmt::Debug for HostAuthentication {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostAuthentication")
            .field("credentials", &self.credentials)
            .field("transaction_id", &self.transaction_id)
            .finish_non_exhaustive()
    }
}

impl HostAuthentication {
    /// A transaction with identifier `transaction_id` (T_ID), not started yet.
    pub fn new(
        credentials: HostCredentials,
        policy: HostPolicy,
        random: Box<dyn RandomSource>,
        transaction_id: u16,
    ) -> Self {
        HostAuthentication {
            credentials,
            policy,
            random,
            transaction_id,
            state: State::Start,
            secure_channel: SecureChannelRequest::None,
            generated: None,
        }
    }

    /// Asks for secure channel concatenation (SC_C): the transaction then generates a
    /// TLS PSK ([`Self::take_generated_psk`] once authenticated). As Linux's host does,
    /// it sends C2 with SEQNUM 0 and does not ask the controller to authenticate
    /// itself (the TLS handshake with the generated PSK proves the controller), and
    /// refuses a challenge with the null DH group or SHA-512.
    pub fn with_secure_channel(mut self, request: SecureChannelRequest) -> Self {
        self.secure_channel = request;
        self
    }

    /// The PSK a successful transaction with secure channel concatenation generated.
    pub fn take_generated_psk(&mut self) -> Option<GeneratedPsk> {
        self.generated.take()
    }

    /// The first step: send AUTH_Negotiate.
    pub fn start(&mut self) -> HostStep {
        // Concatenation cannot use SHA-512 (no TLS cipher suite) or the null group (no
        // session key): they are not offered then, so a controller whose own first
        // choice they are (Linux nvmet's default group is null) falls back to one
        // that works instead of refusing.
        let concatenating = self.secure_channel.generates_psk();
        let usable = |hash: HashFunction| !concatenating || hash != HashFunction::Sha512;
        let usable_group = |group: DhGroup| !concatenating || group != DhGroup::Null;
        let negotiate = Message::Negotiate(Negotiate {
            transaction_id: self.transaction_id,
            secure_channel: self.secure_channel.code(),
            protocols: vec![ProtocolDescriptor {
                auth_id: DHCHAP_AUTH_ID,
                hash_ids: self.policy.hashes.iter().filter(|hash| usable(**hash)).map(|hash| hash.id()).collect(),
                dh_group_ids: self
                    .policy
                    .groups
                    .iter()
                    .filter(|group| usable_group(**group))
                    .map(|group| group.id())
                    .collect(),
            }],
        });
        self.state = State::NegotiateSent;
        HostStep::Send(negotiate.to_bytes())
    }

    /// The previous command ended with `result`: the next step.
    pub fn on_result(&mut self, result: CommandResult<'_>) -> HostStep {
        let state = std::mem::replace(&mut self.state, State::Start);
        let (next, step) = self.transition(state, result);
        self.state = next;
        step
    }

    fn finish(error: HostAuthError) -> (State, HostStep) {
        (State::Finished(Err(error.clone())), HostStep::Failed(error))
    }

    /// Tells the controller why we give up (AUTH_Failure2), then fails.
    fn give_up(&self, reason: FailureReason, error: HostAuthError) -> (State, HostStep) {
        let message = Message::Failure2(Failure::new(self.transaction_id, reason));
        (State::Failure2Sent(error), HostStep::Send(message.to_bytes()))
    }

    fn transition(&mut self, state: State, result: CommandResult<'_>) -> (State, HostStep) {
        if let CommandResult::Status(status) = result {
            return Self::finish(HostAuthError::CommandFailed { status });
        }
        match (state, result) {
            (State::NegotiateSent, CommandResult::Sent) => {
                (State::AwaitingChallenge, HostStep::Receive(RECEIVE_ALLOCATION_BYTES))
            }
            (State::AwaitingChallenge, CommandResult::Received(bytes)) => match Message::decode(bytes) {
                Ok(Message::Challenge(challenge)) if challenge.transaction_id == self.transaction_id => {
                    self.answer_challenge(&challenge)
                }
                Ok(Message::Failure1(failure)) => {
                    Self::finish(HostAuthError::Refused { explanation: failure.explanation })
                }
                Ok(other) => self.give_up(
                    FailureReason::IncorrectMessage,
                    HostAuthError::UnexpectedMessage { received: other.name(), expected: "DH-HMAC-CHAP_Challenge" },
                ),
                Err(error) => self.give_up(FailureReason::IncorrectPayload, HostAuthError::Malformed(error)),
            },
            (State::ReplySent(pending), CommandResult::Sent) => {
                (State::AwaitingSuccess1(pending), HostStep::Receive(RECEIVE_ALLOCATION_BYTES))
            }
            (State::AwaitingSuccess1(pending), CommandResult::Received(bytes)) => match Message::decode(bytes) {
                Ok(Message::Success1(success)) if success.transaction_id == self.transaction_id => {
                    if usize::from(success.hash_length) != pending.hash.length() {
                        return self.give_up(
                            FailureReason::HashUnusable,
                            HostAuthError::Unusable(FailureReason::HashUnusable),
                        );
                    }
                    match &pending.expected_controller_response {
                        None => {
                            self.generated = pending.generated;
                            (State::Finished(Ok(())), HostStep::Authenticated)
                        }
                        Some(expected) => match &success.response {
                            Some(response) if expected.constant_time_eq(response) => {
                                let message = Message::Success2 { transaction_id: self.transaction_id };
                                (State::Success2Sent(pending.generated), HostStep::Send(message.to_bytes()))
                            }
                            _ => self.give_up(FailureReason::Failed, HostAuthError::ControllerNotAuthenticated),
                        },
                    }
                }
                Ok(Message::Failure1(failure)) => {
                    Self::finish(HostAuthError::Refused { explanation: failure.explanation })
                }
                Ok(other) => self.give_up(
                    FailureReason::IncorrectMessage,
                    HostAuthError::UnexpectedMessage { received: other.name(), expected: "DH-HMAC-CHAP_Success1" },
                ),
                Err(error) => self.give_up(FailureReason::IncorrectPayload, HostAuthError::Malformed(error)),
            },
            (State::Success2Sent(generated), CommandResult::Sent) => {
                self.generated = generated;
                (State::Finished(Ok(())), HostStep::Authenticated)
            }
            (State::Failure2Sent(error), CommandResult::Sent) => Self::finish(error),
            (State::Finished(result), _) => {
                let step = match &result {
                    Ok(()) => HostStep::Authenticated,
                    Err(error) => HostStep::Failed(error.clone()),
                };
                (State::Finished(result), step)
            }
            // A result that does not fit the command we asked for (a driver bug, or
            // `on_result` before `start`).
            (_, _) => {
                Self::finish(HostAuthError::UnexpectedMessage { received: "a command result", expected: "another" })
            }
        }
    }

    fn answer_challenge(&mut self, challenge: &crate::message::Challenge) -> (State, HostStep) {
        let unusable = |reason| (reason, HostAuthError::Unusable(reason));
        let checked = (|| {
            let hash = HashFunction::from_id(challenge.hash_id)
                .filter(|hash| self.policy.hashes.contains(hash))
                .ok_or(unusable(FailureReason::HashUnusable))?;
            if challenge.challenge.len() != hash.length() {
                return Err(unusable(FailureReason::HashUnusable));
            }
            let group = DhGroup::from_id(challenge.dh_group_id)
                .filter(|group| self.policy.groups.contains(group))
                .ok_or(unusable(FailureReason::DhGroupUnusable))?;
            if self.secure_channel.generates_psk() && (group == DhGroup::Null || hash == HashFunction::Sha512) {
                return Err(unusable(FailureReason::ConcatenationMismatch));
            }
            match (group, challenge.dh_value.is_empty()) {
                (DhGroup::Null, false) => return Err(unusable(FailureReason::IncorrectPayload)),
                (DhGroup::Null, true) => {}
                (_, true) => return Err(unusable(FailureReason::DhGroupUnusable)),
                (_, false) => {}
            }
            Ok((hash, group))
        })();
        let (hash, group) = match checked {
            Ok(choice) => choice,
            Err((reason, error)) => return self.give_up(reason, error),
        };
        let key = match EphemeralKey::generate(group, self.random.as_mut()) {
            Ok(key) => key,
            Err(_) => return self.give_up(FailureReason::Failed, HostAuthError::Random),
        };
        let session_key: Option<Zeroizing<Vec<u8>>> = if group == DhGroup::Null {
            None
        } else {
            match key.shared_secret(&challenge.dh_value) {
                Ok(secret) => Some(secret),
                Err(_) => {
                    return self.give_up(
                        FailureReason::IncorrectPayload,
                        HostAuthError::Unusable(FailureReason::IncorrectPayload),
                    )
                }
            }
        };
        let credentials = &self.credentials;
        let host_key = credentials.secret.transformed(&credentials.host_nqn);
        let response = host_response(
            &ResponseInput {
                hash,
                key: &host_key,
                challenge: &challenge.challenge,
                sequence_number: challenge.sequence_number,
                transaction_id: self.transaction_id,
                session_key: session_key.as_deref().map(Vec::as_slice),
                secure_channel: self.secure_channel.code(),
            },
            &credentials.host_nqn,
            &credentials.subsystem_nqn,
        );
        // Bidirectional: our own challenge C2 and SEQNUM S2 (nonzero), and the R2 we
        // will expect back.
        let mut controller_challenge = None;
        let mut sequence_number = 0;
        let mut expected_controller_response = None;
        let mut generated = None;
        if self.secure_channel.generates_psk() {
            // C2 feeds the generated PSK; SEQNUM 0 asks for no R2 (as Linux does).
            let mut c2 = vec![0u8; hash.length()];
            if self.random.fill(&mut c2).is_err() {
                return self.give_up(FailureReason::Failed, HostAuthError::Random);
            }
            let Some(session_key) = session_key.as_deref() else {
                return self.give_up(
                    FailureReason::ConcatenationMismatch,
                    HostAuthError::Unusable(FailureReason::ConcatenationMismatch),
                );
            };
            generated = Some(GeneratedPsk::generate(hash, session_key, &challenge.challenge, &c2));
            controller_challenge = Some(c2);
        } else if let Some(controller_secret) = &credentials.controller_secret {
            let mut c2 = vec![0u8; hash.length()];
            let made = self.random.fill(&mut c2).and_then(|()| self.random.nonzero_u32());
            let Ok(s2) = made else {
                return self.give_up(FailureReason::Failed, HostAuthError::Random);
            };
            let controller_key = controller_secret.transformed(&credentials.subsystem_nqn);
            expected_controller_response = Some(controller_response(
                &ResponseInput {
                    hash,
                    key: &controller_key,
                    challenge: &c2,
                    sequence_number: s2,
                    transaction_id: self.transaction_id,
                    session_key: session_key.as_deref().map(Vec::as_slice),
                    secure_channel: self.secure_channel.code(),
                },
                &credentials.subsystem_nqn,
                &credentials.host_nqn,
            ));
            controller_challenge = Some(c2);
            sequence_number = s2;
        }
        let reply = Message::Reply(Reply {
            transaction_id: self.transaction_id,
            response: response.as_bytes().to_vec(),
            controller_challenge,
            sequence_number,
            dh_value: key.public_value().to_vec(),
        });
        (State::ReplySent(Pending { hash, expected_controller_response, generated }), HostStep::Send(reply.to_bytes()))
    }
}
