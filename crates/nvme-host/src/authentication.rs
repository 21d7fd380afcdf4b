//! DH-HMAC-CHAP on a host queue, between the Connect response and `Ready`: the
//! nvme-auth host state machine decides which Authentication Send / Receive to
//! issue; the queue runs them through its ordinary command slots (in-capsule data
//! for Send, C2HData for Receive), so every PDU check applies to them too.

use nvme_auth::{
    CommandResult, HostAuthentication, HostCredentials, HostPolicy, HostStep, OsRandom, SECURITY_PROTOCOL_DHCHAP,
    SECURITY_PROTOCOL_SPECIFIC_DHCHAP,
};
use nvme_spec::fabrics::AuthenticationCommand;
use nvme_spec::opcode::{AdminOpcode, FabricsCommandType};
use nvme_spec::sqe::PSDT_SGL_METADATA_BUFFER;
use nvme_spec::{CommandId, CompletionQueueEntry, SubmissionQueueEntry};

use crate::error::HostError;
use crate::queue::{HostQueue, Phase};
use crate::HostCommand;

/// An Authentication Send (FCTYPE 05h) or Receive (06h) for DH-HMAC-CHAP.
fn authentication_command(fabrics_type: FabricsCommandType, length: u32) -> SubmissionQueueEntry {
    let mut sqe = SubmissionQueueEntry::default();
    sqe.set_cdw0(AdminOpcode::Fabrics as u8, CommandId(0), PSDT_SGL_METADATA_BUFFER);
    sqe.set_fabrics_command_type(fabrics_type as u8);
    AuthenticationCommand {
        security_protocol_specific_0: SECURITY_PROTOCOL_SPECIFIC_DHCHAP,
        security_protocol_specific_1: SECURITY_PROTOCOL_SPECIFIC_DHCHAP,
        security_protocol: SECURITY_PROTOCOL_DHCHAP,
        length,
    }
    .encode_into(&mut sqe);
    sqe
}

impl HostQueue {
    /// Starts DH-HMAC-CHAP after a successful Connect. The queue stays
    /// `Authenticating` (bounded by the setup deadline) until it ends.
    pub(crate) fn start_authentication(&mut self) {
        let Some(secrets) = self.config.dhchap.clone() else {
            // The caller checked: authentication starts only with a secret.
            debug_assert!(false, "authentication without a secret");
            return;
        };
        let credentials = HostCredentials {
            host_nqn: self.config.host_nqn.clone(),
            subsystem_nqn: self.config.subsystem_nqn.clone(),
            secret: secrets.secret,
            controller_secret: secrets.controller_secret,
        };
        // T_ID only has to tell this queue's transactions apart; the QID does.
        let mut transaction =
            HostAuthentication::new(credentials, HostPolicy::default(), Box::new(OsRandom), self.config.queue_id.0)
                .with_secure_channel(secrets.secure_channel);
        let step = transaction.start();
        self.authentication = Some(Box::new(transaction));
        self.phase = Phase::Authenticating;
        tracing::debug!(queue = self.config.queue_id.0, "DH-HMAC-CHAP authentication started");
        self.take_authentication_step(step);
    }

    /// An Authentication Send / Receive completed: feed the result to the state
    /// machine and issue what it asks for next.
    pub(crate) fn authentication_command_done(&mut self, index: u16, cqe: &CompletionQueueEntry) {
        let slot = &mut self.slots[usize::from(index)];
        let received = std::mem::take(&mut slot.data_in);
        let is_receive = slot.data_in_bytes > 0;
        self.release(index);
        let result = if !cqe.status.is_success() {
            CommandResult::Status(cqe.status.field())
        } else if is_receive {
            CommandResult::Received(&received)
        } else {
            CommandResult::Sent
        };
        let Some(transaction) = self.authentication.as_mut() else { return };
        let step = transaction.on_result(result);
        self.take_authentication_step(step);
    }

    fn take_authentication_step(&mut self, step: HostStep) {
        let command = match step {
            HostStep::Send(payload) => HostCommand {
                sqe: authentication_command(FabricsCommandType::AuthenticationSend, payload.len() as u32),
                data_out: payload,
                data_in_bytes: 0,
                user_tag: 0,
                read_destination: None,
                write_source: None,
            },
            HostStep::Receive(allocation_length) => HostCommand {
                sqe: authentication_command(FabricsCommandType::AuthenticationReceive, allocation_length),
                data_out: Vec::new(),
                data_in_bytes: allocation_length,
                user_tag: 0,
                read_destination: None,
                write_source: None,
            },
            HostStep::Authenticated => {
                self.generated_psk =
                    self.authentication.take().and_then(|mut transaction| transaction.take_generated_psk());
                self.phase = Phase::Ready;
                self.setup_deadline = None;
                tracing::debug!(queue = self.config.queue_id.0, "DH-HMAC-CHAP authentication succeeded");
                return;
            }
            HostStep::Failed(error) => {
                self.authentication = None;
                self.fail(HostError::Authentication { error }, None);
                return;
            }
        };
        // The setup deadline bounds the whole exchange; the commands need none of
        // their own. The queue is empty while authenticating, so a slot is free.
        if let Err(error) = self.enqueue(command, None) {
            debug_assert!(false, "no slot for an authentication command: {error}");
            self.fail(HostError::ConnectionLost, None);
        }
    }
}
