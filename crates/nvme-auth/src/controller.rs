//! The controller side of one queue's DH-HMAC-CHAP transaction.
//!
//! The host drives: each Authentication Send hands a message to
//! [`ControllerAuthentication::on_send`], each Authentication Receive asks
//! [`ControllerAuthentication::on_receive`] for the next message. Problems with a
//! received message never fail the Send command itself (as Linux does): the
//! controller answers the next Receive with AUTH_Failure1 naming the reason.
//!
//! ```text
//!                 Send(Negotiate)              Receive              Send(Reply, R1 ok)
//! AwaitingNegotiate ----------> ChallengePending -------> AwaitingReply ----------> Success1Pending
//!                                                       (Challenge sent)                |
//!   Receive (Success1, unidirectional) -> Authenticated <--- Send(Success2) --- AwaitingSuccess2
//!                                                                 Receive (Success1 with R2)
//!
//! any problem -> Failure1Pending --Receive (Failure1)--> Failed
//! Send(Failure2) from any state -> Failed;  Send(Negotiate) restarts (re-authentication)
//! ```

use zeroize::Zeroizing;

use crate::concat::{GeneratedPsk, SecureChannelRequest};
use crate::group::{DhGroup, EphemeralKey};
use crate::hash::{DigestValue, HashFunction};
use crate::message::{
    Challenge, Failure, FailureReason, Message, Negotiate, Reply, Success1, DHCHAP_AUTH_ID, FAILURE_BYTES,
    FIXED_PART_BYTES,
};
use crate::random::RandomSource;
use crate::response::{controller_response, host_response, ResponseInput};
use crate::secret::{Secret, TransformedKey};

/// Which hash functions and groups the controller accepts, most preferred first.
/// The controller picks its most preferred entry that the host offers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControllerPolicy {
    /// Acceptable hash functions.
    pub hashes: Vec<HashFunction>,
    /// Acceptable DH groups.
    pub groups: Vec<DhGroup>,
}

impl Default for ControllerPolicy {
    /// SHA-256 first (every host has it; a longer hash adds nothing against a
    /// 32-byte secret), and Diffie-Hellman before the null group: a DH exchange keeps
    /// a recorded transaction from being attacked offline against the secret.
    /// ffdhe2048 first because it is the cheapest group (a few milliseconds per queue).
    fn default() -> Self {
        ControllerPolicy {
            hashes: vec![HashFunction::Sha256, HashFunction::Sha384, HashFunction::Sha512],
            groups: vec![
                DhGroup::Ffdhe2048,
                DhGroup::Ffdhe3072,
                DhGroup::Ffdhe4096,
                DhGroup::Ffdhe6144,
                DhGroup::Ffdhe8192,
                DhGroup::Null,
            ],
        }
    }
}

impl ControllerPolicy {
    /// A policy of exactly these hashes and groups, most preferred first; `None`
    /// when either list is empty (nothing could ever be negotiated).
    pub fn new(hashes: Vec<HashFunction>, groups: Vec<DhGroup>) -> Option<Self> {
        (!hashes.is_empty() && !groups.is_empty()).then_some(ControllerPolicy { hashes, groups })
    }
}

/// What a transaction negotiated, for log lines and statistics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Negotiated {
    /// The hash function chosen from the host's list.
    pub hash: HashFunction,
    /// The Diffie-Hellman group chosen from the host's list.
    pub group: DhGroup,
    /// The host asked the controller to authenticate itself too.
    pub bidirectional: bool,
    /// SC_C: whether the transaction generates a TLS PSK (secure channel
    /// concatenation).
    pub secure_channel: SecureChannelRequest,
}

/// Where a queue's transaction runs, for secure channel concatenation (SC_C): which
/// requests the controller accepts. The default accepts none (SC_C 00h only).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SecureChannelContext {
    /// The host may generate TLS PSKs (the administrator allowed concatenation).
    pub allowed: bool,
    /// The queue is an admin queue (concatenation happens there only).
    pub admin_queue: bool,
    /// The queue runs over TLS already (REPLACETLSPSK) or not (NEWTLSPSK).
    pub on_tls: bool,
}

impl SecureChannelContext {
    /// Whether SC_C = `request` is acceptable on this queue (NVMe Base 2.1,
    /// "Secure Channel Concatenation"; what Linux's nvmet accepts).
    pub fn accepts(self, request: SecureChannelRequest) -> bool {
        match request {
            SecureChannelRequest::None => true,
            SecureChannelRequest::NewTlsPsk => self.allowed && self.admin_queue && !self.on_tls,
            SecureChannelRequest::ReplaceTlsPsk => self.allowed && self.admin_queue && self.on_tls,
        }
    }
}

/// The secrets of one (host, subsystem) pair, already transformed.
pub struct ControllerCredentials {
    host_nqn: String,
    subsystem_nqn: String,
    host_key: TransformedKey,
    controller_key: Option<TransformedKey>,
}

impl ControllerCredentials {
    /// Credentials for `host_nqn` connecting to `subsystem_nqn`: the host's secret
    /// (which it must prove it knows) and optionally the controller's secret (for
    /// bidirectional authentication, when the host asks).
    pub fn new(host_nqn: &str, subsystem_nqn: &str, host_secret: &Secret, controller_secret: Option<&Secret>) -> Self {
        ControllerCredentials {
            host_nqn: host_nqn.to_string(),
            subsystem_nqn: subsystem_nqn.to_string(),
            host_key: host_secret.transformed(host_nqn),
            controller_key: controller_secret.map(|secret| secret.transformed(subsystem_nqn)),
        }
    }
}

impl std::fmt::Debug for ControllerCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControllerCredentials")
            .field("host_nqn", &self.host_nqn)
            .field("subsystem_nqn", &self.subsystem_nqn)
            .field("bidirectional", &self.controller_key.is_some())
            .finish_non_exhaustive()
    }
}

/// Where the transaction is after a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// More messages are to come.
    InProgress,
    /// The host is authenticated (and, if it asked, so is the controller).
    Authenticated,
    /// Authentication failed for this reason; the queue must not be used.
    Failed(FailureReason),
}

/// Why an Authentication Receive cannot be answered: the command fails, the state
/// does not change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReceiveError {
    /// AL is smaller than the message to return.
    #[error("allocation length {allocation_length} is below the {needed}-byte message")]
    AllocationTooSmall {
        /// The message's size.
        needed: usize,
        /// AL.
        allocation_length: usize,
    },
}

/// What the controller learnt in the Reply, kept for Success1.
struct Verified {
    transaction_id: u16,
    hash: HashFunction,
    /// R2 when the host asked for bidirectional authentication.
    controller_response: Option<DigestValue>,
    /// The PSK the transaction generated (secure channel concatenation).
    generated: Option<GeneratedPsk>,
}

enum State {
    AwaitingNegotiate,
    ChallengePending {
        transaction_id: u16,
        hash: HashFunction,
        group: DhGroup,
    },
    AwaitingReply {
        transaction_id: u16,
        hash: HashFunction,
        challenge: DigestValue,
        sequence_number: u32,
        key: EphemeralKey,
    },
    Success1Pending(Verified),
    AwaitingSuccess2 {
        transaction_id: u16,
        generated: Option<GeneratedPsk>,
    },
    Authenticated,
    Failure1Pending {
        transaction_id: u16,
        reason: FailureReason,
    },
    Failed(FailureReason),
}

impl State {
    fn name(&self) -> &'static str {
        match self {
            State::AwaitingNegotiate => "awaiting AUTH_Negotiate",
            State::ChallengePending { .. } => "challenge pending",
            State::AwaitingReply { .. } => "awaiting DH-HMAC-CHAP_Reply",
            State::Success1Pending(_) => "success1 pending",
            State::AwaitingSuccess2 { .. } => "awaiting DH-HMAC-CHAP_Success2",
            State::Authenticated => "authenticated",
            State::Failure1Pending { .. } => "failure1 pending",
            State::Failed(_) => "failed",
        }
    }
}

/// The controller's side of DH-HMAC-CHAP on one queue. See the module docs.
pub struct ControllerAuthentication {
    credentials: ControllerCredentials,
    policy: ControllerPolicy,
    random: Box<dyn RandomSource>,
    state: State,
    /// Set by the Negotiate of the latest transaction.
    negotiated: Option<Negotiated>,
    /// Which SC_C requests this queue accepts.
    secure_channel: SecureChannelContext,
    /// SC_C of the latest Negotiate.
    request: SecureChannelRequest,
    /// The PSK the latest successful transaction generated, until taken.
    generated: Option<GeneratedPsk>,
}

impl std::fmt::Debug for ControllerAuthentication {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControllerAuthentication")
            .field("credentials", &self.credentials)
            .field("state", &self.state.name())
            .finish_non_exhaustive()
    }
}

impl ControllerAuthentication {
    /// A queue waiting for the host's AUTH_Negotiate.
    pub fn new(credentials: ControllerCredentials, policy: ControllerPolicy, random: Box<dyn RandomSource>) -> Self {
        ControllerAuthentication {
            credentials,
            policy,
            random,
            state: State::AwaitingNegotiate,
            negotiated: None,
            secure_channel: SecureChannelContext::default(),
            request: SecureChannelRequest::None,
            generated: None,
        }
    }

    /// Which secure channel concatenation requests (SC_C) this queue accepts; none
    /// unless set. A request the context does not accept fails the transaction with
    /// AUTH_Failure1 "secure channel concatenation mismatch".
    pub fn with_secure_channel(mut self, context: SecureChannelContext) -> Self {
        self.secure_channel = context;
        self
    }

    /// The PSK the latest successful transaction generated (SC_C NEWTLSPSK or
    /// REPLACETLSPSK), once: the caller files it where the TLS handshake finds it.
    pub fn take_generated_psk(&mut self) -> Option<GeneratedPsk> {
        self.generated.take()
    }

    /// The state's name, for log lines.
    pub fn state_name(&self) -> &'static str {
        self.state.name()
    }

    /// The hash, group and direction of the latest transaction, once negotiated.
    pub fn negotiated(&self) -> Option<Negotiated> {
        self.negotiated
    }

    /// True once the transaction succeeded (until a re-authentication starts).
    pub fn is_authenticated(&self) -> bool {
        matches!(self.state, State::Authenticated)
    }

    /// The payload of an Authentication Send (exactly TL bytes).
    pub fn on_send(&mut self, payload: &[u8]) -> Progress {
        let state = std::mem::replace(&mut self.state, State::AwaitingNegotiate);
        let (next, progress) = self.step_send(state, payload);
        self.state = next;
        progress
    }

    /// Answers an Authentication Receive with `allocation_length` (AL) bytes of
    /// room: the message to return (the caller pads it to AL) and the progress.
    pub fn on_receive(&mut self, allocation_length: usize) -> Result<(Vec<u8>, Progress), ReceiveError> {
        let needed = self.next_message_bytes();
        if allocation_length < needed {
            return Err(ReceiveError::AllocationTooSmall { needed, allocation_length });
        }
        let state = std::mem::replace(&mut self.state, State::AwaitingNegotiate);
        let (next, message, progress) = self.step_receive(state);
        self.state = next;
        Ok((message.to_bytes(), progress))
    }

    /// Size of the message the next Receive returns.
    fn next_message_bytes(&self) -> usize {
        match &self.state {
            State::ChallengePending { hash, group, .. } => FIXED_PART_BYTES + hash.length() + group.value_bytes(),
            State::Success1Pending(verified) => {
                FIXED_PART_BYTES + verified.controller_response.as_ref().map_or(0, |response| response.as_bytes().len())
            }
            _ => FAILURE_BYTES,
        }
    }

    fn step_send(&mut self, state: State, payload: &[u8]) -> (State, Progress) {
        let current_transaction = match &state {
            State::ChallengePending { transaction_id, .. }
            | State::AwaitingReply { transaction_id, .. }
            | State::AwaitingSuccess2 { transaction_id, .. }
            | State::Failure1Pending { transaction_id, .. } => *transaction_id,
            State::Success1Pending(verified) => verified.transaction_id,
            _ => 0,
        };
        let fail = |transaction_id, reason| (State::Failure1Pending { transaction_id, reason }, Progress::InProgress);
        if let State::Failed(reason) = state {
            // Terminal: the queue is being torn down.
            return (State::Failed(reason), Progress::Failed(reason));
        }
        let message = match Message::decode(payload) {
            Ok(message) => message,
            Err(_) => return fail(current_transaction, FailureReason::IncorrectPayload),
        };
        match (state, message) {
            // A Negotiate starts (or restarts) a transaction from any live state.
            (_, Message::Negotiate(negotiate)) => self.negotiate(&negotiate),
            (_, Message::Failure2(failure)) => {
                let reason = FailureReason::from_code(failure.explanation).unwrap_or(FailureReason::Failed);
                (State::Failed(reason), Progress::Failed(reason))
            }
            (State::AwaitingReply { transaction_id, hash, challenge, sequence_number, key }, Message::Reply(reply)) => {
                if reply.transaction_id != transaction_id {
                    return fail(transaction_id, FailureReason::IncorrectPayload);
                }
                match self.verify_reply(&reply, hash, &challenge, sequence_number, &key) {
                    Ok(verified) => (State::Success1Pending(verified), Progress::InProgress),
                    Err(reason) => fail(transaction_id, reason),
                }
            }
            (State::AwaitingSuccess2 { transaction_id, generated }, Message::Success2 { transaction_id: received }) => {
                if received != transaction_id {
                    // No Receive follows a Success2, so there is no one to tell.
                    let reason = FailureReason::IncorrectPayload;
                    return (State::Failed(reason), Progress::Failed(reason));
                }
                self.generated = generated;
                (State::Authenticated, Progress::Authenticated)
            }
            (State::AwaitingSuccess2 { .. }, _) => {
                let reason = FailureReason::IncorrectMessage;
                (State::Failed(reason), Progress::Failed(reason))
            }
            (_, _) => fail(current_transaction, FailureReason::IncorrectMessage),
        }
    }

    fn negotiate(&mut self, negotiate: &Negotiate) -> (State, Progress) {
        let transaction_id = negotiate.transaction_id;
        let fail = |reason| (State::Failure1Pending { transaction_id, reason }, Progress::InProgress);
        // A new transaction: nothing generated by an earlier one is handed out now.
        self.generated = None;
        self.request = SecureChannelRequest::None;
        // SC_C: 01h and reserved values, or a request this queue does not take (not
        // allowed for the host, an I/O queue, NEWTLSPSK over TLS, REPLACETLSPSK
        // without), are a concatenation mismatch, as in Linux's nvmet.
        let request = match SecureChannelRequest::from_code(negotiate.secure_channel) {
            Some(request) if self.secure_channel.accepts(request) => request,
            _ => return fail(FailureReason::ConcatenationMismatch),
        };
        let concatenating = request.generates_psk();
        let Some(protocol) = negotiate.protocols.iter().find(|protocol| protocol.auth_id == DHCHAP_AUTH_ID) else {
            return fail(FailureReason::ProtocolNotUsable);
        };
        // A generated PSK needs a TLS cipher suite's hash (SHA-256 or SHA-384) and a
        // Diffie-Hellman session key: SHA-512 and the null group are passed over.
        let Some(hash) = self
            .policy
            .hashes
            .iter()
            .copied()
            .filter(|hash| !concatenating || *hash != HashFunction::Sha512)
            .find(|hash| protocol.hash_ids.contains(&hash.id()))
        else {
            return fail(FailureReason::HashUnusable);
        };
        let usable_group = |group: &DhGroup| !concatenating || *group != DhGroup::Null;
        let Some(group) = self
            .policy
            .groups
            .iter()
            .copied()
            .filter(usable_group)
            .find(|group| protocol.dh_group_ids.contains(&group.id()))
        else {
            let offered_null_only = concatenating && protocol.dh_group_ids.contains(&DhGroup::Null.id());
            return fail(if offered_null_only {
                FailureReason::ConcatenationMismatch
            } else {
                FailureReason::DhGroupUnusable
            });
        };
        self.request = request;
        self.negotiated = Some(Negotiated { hash, group, bidirectional: false, secure_channel: request });
        (State::ChallengePending { transaction_id, hash, group }, Progress::InProgress)
    }

    fn verify_reply(
        &mut self,
        reply: &Reply,
        hash: HashFunction,
        challenge: &DigestValue,
        sequence_number: u32,
        key: &EphemeralKey,
    ) -> Result<Verified, FailureReason> {
        if reply.response.len() != hash.length() {
            return Err(FailureReason::IncorrectPayload);
        }
        let session_key: Option<Zeroizing<Vec<u8>>> = match key.group() {
            DhGroup::Null if reply.dh_value.is_empty() => None,
            DhGroup::Null => return Err(FailureReason::IncorrectPayload),
            _ => Some(key.shared_secret(&reply.dh_value).map_err(|_| FailureReason::DhGroupUnusable)?),
        };
        let credentials = &self.credentials;
        let expected = host_response(
            &ResponseInput {
                hash,
                key: &credentials.host_key,
                challenge: challenge.as_bytes(),
                sequence_number,
                transaction_id: reply.transaction_id,
                session_key: session_key.as_deref().map(Vec::as_slice),
                secure_channel: self.request.code(),
            },
            &credentials.host_nqn,
            &credentials.subsystem_nqn,
        );
        if !expected.constant_time_eq(&reply.response) {
            return Err(FailureReason::Failed);
        }
        // Concatenation generates the PSK from C1 and C2: a Reply without C2 cannot.
        let generated = if self.request.generates_psk() {
            match (&reply.controller_challenge, session_key.as_deref()) {
                (Some(c2), Some(session_key)) => {
                    Some(GeneratedPsk::generate(hash, session_key, challenge.as_bytes(), c2))
                }
                _ => return Err(FailureReason::Failed),
            }
        } else {
            None
        };
        // A C2 with SEQNUM 0 only feeds the generated PSK: the host does not ask the
        // controller to authenticate itself.
        let controller_response = match &reply.controller_challenge {
            Some(challenge) if reply.sequence_number != 0 => {
                let controller_key = credentials.controller_key.as_ref().ok_or(FailureReason::Failed)?;
                Some(controller_response(
                    &ResponseInput {
                        hash,
                        key: controller_key,
                        challenge,
                        sequence_number: reply.sequence_number,
                        transaction_id: reply.transaction_id,
                        session_key: session_key.as_deref().map(Vec::as_slice),
                        secure_channel: self.request.code(),
                    },
                    &credentials.subsystem_nqn,
                    &credentials.host_nqn,
                ))
            }
            _ => None,
        };
        if let Some(negotiated) = self.negotiated.as_mut() {
            negotiated.bidirectional = controller_response.is_some();
        }
        Ok(Verified { transaction_id: reply.transaction_id, hash, controller_response, generated })
    }

    fn step_receive(&mut self, state: State) -> (State, Message, Progress) {
        let failure = |transaction_id, reason| {
            (State::Failed(reason), Message::Failure1(Failure::new(transaction_id, reason)), Progress::Failed(reason))
        };
        match state {
            State::ChallengePending { transaction_id, hash, group } => {
                let mut challenge = vec![0u8; hash.length()];
                let made = self.random.fill(&mut challenge).and_then(|()| {
                    let sequence_number = self.random.nonzero_u32()?;
                    let key = EphemeralKey::generate(group, self.random.as_mut())?;
                    Ok((sequence_number, key))
                });
                let Ok((sequence_number, key)) = made else {
                    return failure(transaction_id, FailureReason::Failed);
                };
                let message = Message::Challenge(Challenge {
                    transaction_id,
                    hash_id: hash.id(),
                    dh_group_id: group.id(),
                    sequence_number,
                    challenge: challenge.clone(),
                    dh_value: key.public_value().to_vec(),
                });
                let challenge = DigestValue::copy_of(&challenge);
                (
                    State::AwaitingReply { transaction_id, hash, challenge, sequence_number, key },
                    message,
                    Progress::InProgress,
                )
            }
            State::Success1Pending(verified) => {
                let bidirectional = verified.controller_response.is_some();
                let message = Message::Success1(Success1 {
                    transaction_id: verified.transaction_id,
                    hash_length: verified.hash.length() as u8,
                    response: verified.controller_response.as_ref().map(|response| response.as_bytes().to_vec()),
                });
                if bidirectional {
                    let next = State::AwaitingSuccess2 {
                        transaction_id: verified.transaction_id,
                        generated: verified.generated,
                    };
                    (next, message, Progress::InProgress)
                } else {
                    self.generated = verified.generated;
                    (State::Authenticated, message, Progress::Authenticated)
                }
            }
            State::Failure1Pending { transaction_id, reason } => failure(transaction_id, reason),
            State::AwaitingReply { transaction_id, .. } => failure(transaction_id, FailureReason::IncorrectMessage),
            State::AwaitingSuccess2 { transaction_id, .. } => failure(transaction_id, FailureReason::IncorrectMessage),
            State::AwaitingNegotiate | State::Authenticated => failure(0, FailureReason::IncorrectMessage),
            State::Failed(reason) => failure(0, reason),
        }
    }
}
