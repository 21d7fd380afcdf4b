//! Receiving: the PDU stream from the target. The PDU reader checks framing
//! (lengths, digests, sequence); the handlers here check every PDU against the
//! command it names before any of its data is taken.

use std::time::Instant;

use nvme_spec::fabrics::connect_authentication_required;
use nvme_spec::{CompletionQueueEntry, ControllerId, Status};
use nvme_tcp_wire::{
    offsets, DataHeader, FatalErrorStatus, InitializeConnectionResponse, PduHeader, PduType, ReadError, ReadErrorKind,
    ReadEvent, ReadyToTransfer, TerminationRequest,
};

use crate::error::{HostError, IcRespProblem};
use crate::queue::{deadline_after, HostQueue, Pending, Phase, Sink, CONNECT_COMMAND_ID};
use crate::MIN_MAX_H2C_DATA_BYTES;

/// An H2CTermReq for a PDU the host refuses, without a copy of its header (the
/// offending header is optional; Linux and the target send none for their own
/// semantic checks either).
fn termination(status: FatalErrorStatus, info: u32) -> Option<TerminationRequest> {
    Some(TerminationRequest::new(status, info, &[]))
}

impl HostQueue {
    /// Bytes received from the target, in any chunking. Consumes all of them; after
    /// the queue failed, input is ignored.
    pub fn handle_received(&mut self, mut input: &[u8], now: Instant) {
        while self.phase != Phase::Failed {
            match self.reader.next_event(&mut input) {
                Ok(None) => break,
                Ok(Some(ReadEvent::Header { header, data_length })) => self.on_header(header, data_length, now),
                Ok(Some(ReadEvent::Data(chunk))) => self.on_data(chunk),
                Ok(Some(ReadEvent::DataEnd { data_digest_ok })) => self.on_data_end(data_digest_ok),
                Err(error) => self.on_stream_error(&error),
            }
        }
    }

    fn on_stream_error(&mut self, error: &ReadError) {
        let host_error = match error.kind {
            ReadErrorKind::HeaderDigestMismatch { received, computed } => {
                HostError::HeaderDigestMismatch { received, computed }
            }
            kind if error.pdu_type == Some(PduType::IcResp) => {
                HostError::BadIcResp { reason: IcRespProblem::Malformed(kind) }
            }
            kind => HostError::InvalidPdu { kind },
        };
        let termination = error.should_send_termination().then(|| error.termination_request());
        self.fail(host_error, termination);
    }

    fn on_header(&mut self, header: PduHeader, data_length: u32, now: Instant) {
        self.sink = Sink::None;
        match header {
            PduHeader::IcResp(response) => self.on_initialize_connection(response, now),
            PduHeader::CapsuleResp(response) => self.on_response(response.cqe, now),
            PduHeader::C2hData(data) => self.on_controller_data(data, data_length),
            PduHeader::R2t(request) => self.on_ready_to_transfer(request),
            PduHeader::C2hTermReq(request) => {
                // Never answered with another TermReq: the target closes.
                self.fail(HostError::TerminatedByTarget { status: request.status, info: request.info }, None);
            }
            // The Host-role reader refuses host-to-controller types and repeated
            // ICResps; this arm only keeps the match total.
            other => self.fail(
                HostError::UnexpectedPdu { pdu_type: other.pdu_type(), reason: "not a controller-to-host PDU" },
                termination(FatalErrorStatus::InvalidPduHeaderField, offsets::PDU_TYPE),
            ),
        }
    }

    fn on_initialize_connection(&mut self, response: InitializeConnectionResponse, now: Instant) {
        if self.phase != Phase::Initializing {
            self.fail(
                HostError::UnexpectedPdu { pdu_type: PduType::IcResp, reason: "connection already initialized" },
                termination(FatalErrorStatus::PduSequenceError, 0),
            );
            return;
        }
        let requested = self.config.digests;
        if response.digests != requested {
            let reason = IcRespProblem::DigestsNotEchoed { requested, granted: response.digests };
            self.fail(
                HostError::BadIcResp { reason },
                termination(FatalErrorStatus::InvalidPduHeaderField, offsets::DGST),
            );
            return;
        }
        let max_h2c = response.max_h2c_data_bytes;
        if max_h2c < MIN_MAX_H2C_DATA_BYTES || !max_h2c.is_multiple_of(4) {
            self.fail(
                HostError::BadIcResp { reason: IcRespProblem::MaxH2cData(max_h2c) },
                termination(FatalErrorStatus::InvalidPduHeaderField, offsets::IC_LIMIT),
            );
            return;
        }
        // From the next PDU on, both directions carry the negotiated digests; our
        // H2C PDU data starts at the CPDA the controller asked for.
        self.reader.set_digests(requested);
        self.writer.set_digests(requested);
        self.writer.set_data_alignment(response.controller_pdu_data_alignment);
        self.max_h2c_data_bytes = max_h2c;
        self.phase = Phase::Connecting;
        self.setup_deadline = deadline_after(now, self.config.command_timeout_ms);
        self.pending.push_back(Pending::Connect);
        tracing::debug!(
            queue = self.config.queue_id.0,
            max_h2c,
            cpda = response.controller_pdu_data_alignment,
            "ICResp accepted"
        );
    }

    fn on_response(&mut self, cqe: CompletionQueueEntry, now: Instant) {
        match self.phase {
            Phase::Connecting => self.on_connect_response(cqe, now),
            Phase::Ready | Phase::Authenticating => match self.outstanding_slot(cqe.command_id) {
                Some(index) => self.complete(index, cqe),
                None => self.fail(
                    HostError::UnknownCommandId { pdu_type: PduType::CapsuleResp, command_id: cqe.command_id.0 },
                    // CID sits at byte 12 of the CQE, byte 20 of the PDU.
                    termination(FatalErrorStatus::InvalidPduHeaderField, 20),
                ),
            },
            _ => self.fail(
                HostError::UnexpectedPdu { pdu_type: PduType::CapsuleResp, reason: "no command outstanding yet" },
                termination(FatalErrorStatus::PduSequenceError, 0),
            ),
        }
    }

    fn on_connect_response(&mut self, cqe: CompletionQueueEntry, now: Instant) {
        if cqe.command_id != CONNECT_COMMAND_ID {
            self.fail(
                HostError::UnknownCommandId { pdu_type: PduType::CapsuleResp, command_id: cqe.command_id.0 },
                termination(FatalErrorStatus::InvalidPduHeaderField, 20),
            );
            return;
        }
        let dw0 = cqe.result_dw0;
        if !cqe.status.is_success() {
            self.fail(HostError::ConnectRejected { status: cqe.status, dw0 }, None);
            return;
        }
        if dw0 & connect_authentication_required::SECURE_CHANNEL != 0 {
            let reason = "secure channel concatenation required (not supported)";
            self.fail(HostError::BadConnectResponse { dw0, reason }, None);
            return;
        }
        let authentication_required = dw0 & connect_authentication_required::TRANSACTION != 0;
        // With a controller secret the controller must prove itself whether or not
        // it asks for authentication: not asking must not skip the proof.
        let wants_proof = self.config.dhchap.as_ref().is_some_and(|secrets| secrets.controller_secret.is_some());
        if authentication_required && self.config.dhchap.is_none() {
            let reason = "authentication required (AUTHREQ.ATR) but no DH-HMAC-CHAP secret is configured";
            self.fail(HostError::BadConnectResponse { dw0, reason }, None);
            return;
        }
        let controller_id = if self.config.queue_id.is_admin() {
            let id = ControllerId(dw0 as u16);
            if id.0 > ControllerId::MAX_VALID {
                self.fail(HostError::BadConnectResponse { dw0, reason: "reserved CNTLID" }, None);
                return;
            }
            id
        } else {
            // An I/O queue's Connect DW0 need not carry the CNTLID (the spec makes it
            // meaningful for the admin queue only); it joined the one we named.
            self.config.controller_id
        };
        self.controller_id = Some(controller_id);
        tracing::debug!(queue = self.config.queue_id.0, controller = controller_id.0, "queue connected");
        if authentication_required || wants_proof {
            // The exchange counts as part of setup: a fresh setup deadline bounds it.
            self.setup_deadline = deadline_after(now, self.config.command_timeout_ms);
            self.start_authentication();
            return;
        }
        self.phase = Phase::Ready;
        self.setup_deadline = None;
    }

    fn on_controller_data(&mut self, data: DataHeader, data_length: u32) {
        if !matches!(self.phase, Phase::Ready | Phase::Authenticating) {
            self.fail(
                HostError::UnexpectedPdu { pdu_type: PduType::C2hData, reason: "data before the queue is connected" },
                termination(FatalErrorStatus::PduSequenceError, 0),
            );
            return;
        }
        let Some(index) = self.outstanding_slot(data.command_id) else {
            self.fail(
                HostError::UnknownCommandId { pdu_type: PduType::C2hData, command_id: data.command_id.0 },
                termination(FatalErrorStatus::InvalidPduHeaderField, offsets::CCCID),
            );
            return;
        };
        let slot = &self.slots[usize::from(index)];
        if slot.data_in_bytes == 0 {
            self.fail(
                HostError::UnexpectedPdu {
                    pdu_type: PduType::C2hData,
                    reason: "C2HData for a command that reads no data",
                },
                termination(FatalErrorStatus::InvalidPduHeaderField, offsets::CCCID),
            );
            return;
        }
        let received = slot.received_bytes;
        let end = u64::from(data.data_offset) + u64::from(data_length);
        if data.data_offset != received || end > u64::from(slot.data_in_bytes) {
            let error = HostError::DataOutOfRange {
                pdu_type: PduType::C2hData,
                command_id: index,
                offset: data.data_offset,
                length: data_length,
                expected_offset: received,
                limit: slot.data_in_bytes,
            };
            self.fail(error, termination(FatalErrorStatus::DataTransferOutOfRange, offsets::DATA_OFFSET));
            return;
        }
        self.sink = Sink::Read { slot: index, success: data.success };
    }

    fn on_data(&mut self, chunk: &[u8]) {
        let Sink::Read { slot, .. } = self.sink else { return };
        let slot = &mut self.slots[usize::from(slot)];
        // The header check bounded offset + length by data_in_bytes, and submit
        // reserved that much: this never reallocates. The extra check keeps a bug
        // from overrunning the command's length.
        let offset = slot.received_bytes as usize;
        if offset + chunk.len() > slot.data_in_bytes as usize {
            return;
        }
        match (slot.destination, &self.read_destination) {
            (Some(destination), Some(sink)) => sink.write(destination, offset, chunk),
            _ => slot.data_in.extend_from_slice(chunk),
        }
        slot.received_bytes += chunk.len() as u32;
    }

    fn on_data_end(&mut self, data_digest_ok: bool) {
        let sink = std::mem::replace(&mut self.sink, Sink::None);
        let Sink::Read { slot: index, success } = sink else { return };
        let slot = &mut self.slots[usize::from(index)];
        if !data_digest_ok {
            // Like Linux: the stream is still in sync (lengths were right), so only
            // this command fails, with Data Transfer Error, when it completes.
            tracing::warn!(queue = self.config.queue_id.0, command_id = index, "data digest mismatch");
            if slot.transport_error.is_none() {
                slot.transport_error = Some(HostError::DataDigestMismatch { command_id: index });
            }
        }
        if success {
            // SUCCESS (with LAST, the reader checked) stands in for a CapsuleResp.
            let cqe = CompletionQueueEntry {
                command_id: slot.sqe.command_id(),
                submission_queue_id: self.config.queue_id,
                status: Status::SUCCESS,
                ..CompletionQueueEntry::default()
            };
            self.complete(index, cqe);
        }
    }

    fn on_ready_to_transfer(&mut self, request: ReadyToTransfer) {
        if !matches!(self.phase, Phase::Ready | Phase::Authenticating) {
            self.fail(
                HostError::UnexpectedPdu { pdu_type: PduType::R2t, reason: "R2T before the queue is connected" },
                termination(FatalErrorStatus::PduSequenceError, 0),
            );
            return;
        }
        let Some(index) = self.outstanding_slot(request.command_id) else {
            self.fail(
                HostError::UnknownCommandId { pdu_type: PduType::R2t, command_id: request.command_id.0 },
                termination(FatalErrorStatus::InvalidPduHeaderField, offsets::CCCID),
            );
            return;
        };
        let limit = self.config.max_r2t_outstanding.saturating_add(1);
        let slot = &mut self.slots[usize::from(index)];
        if slot.in_capsule || slot.data_out_bytes == 0 {
            self.fail(
                HostError::UnexpectedPdu { pdu_type: PduType::R2t, reason: "R2T for a command without R2T data" },
                termination(FatalErrorStatus::InvalidPduHeaderField, offsets::CCCID),
            );
            return;
        }
        let end = u64::from(request.offset) + u64::from(request.length);
        // R2Ts must ask for the data in order, without gaps or overlaps, and only
        // for data the command has (Linux checks the same).
        if request.length == 0 || request.offset != slot.requested_bytes || end > u64::from(slot.data_out_bytes) {
            let error = HostError::DataOutOfRange {
                pdu_type: PduType::R2t,
                command_id: index,
                offset: request.offset,
                length: request.length,
                expected_offset: slot.requested_bytes,
                limit: slot.data_out_bytes,
            };
            self.fail(error, termination(FatalErrorStatus::DataTransferOutOfRange, offsets::DATA_OFFSET));
            return;
        }
        if slot.r2t_pending >= limit {
            self.fail(
                HostError::R2tLimitExceeded { command_id: index, limit },
                termination(FatalErrorStatus::DataTransferLimitExceeded, 0),
            );
            return;
        }
        slot.requested_bytes = end as u32;
        slot.r2t_pending += 1;
        let generation = slot.generation;
        self.pending.push_back(Pending::HostData {
            slot: index,
            generation,
            transfer_tag: request.transfer_tag,
            offset: request.offset,
            length: request.length,
        });
    }
}
