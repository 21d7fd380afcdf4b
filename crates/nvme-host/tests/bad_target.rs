//! A misbehaving target, scripted byte by byte: every case ends in a clear error
//! (or a per-command failure), never a panic or a hang.

mod support;

use std::time::Instant;

use nvme_host::{commands, FaultOrigin, HostError, HostQueue, IcRespProblem, QueueState};
use nvme_spec::Status;
use nvme_tcp_wire::{
    DataHeader, DigestSettings, FatalErrorStatus, PduHeader, PduWriter, ReadErrorKind, ReadyToTransfer,
    TerminationRequest,
};
use proptest::prelude::*;
use support::*;

const NO_DIGESTS: DigestSettings = DigestSettings { header: false, data: false };
const DATA_DIGESTS: DigestSettings = DigestSettings { header: false, data: true };

fn new_queue(digests: DigestSettings) -> (HostQueue, FakeTarget, Instant) {
    let now = Instant::now();
    (HostQueue::new(io_config(nvme_spec::ControllerId(1), 1, 8, digests), now), FakeTarget::default(), now)
}

fn ready_queue(digests: DigestSettings) -> (HostQueue, FakeTarget, Instant) {
    let (mut host, mut target, now) = new_queue(digests);
    target.accept(&mut host, now, digests);
    (host, target, now)
}

/// The H2CTermReq the host sent last, if any.
fn sent_termination(host: &mut HostQueue, target: &mut FakeTarget) -> Option<TerminationRequest> {
    target.take_from(host);
    target.received.iter().rev().find_map(|(header, _)| match header {
        PduHeader::H2cTermReq(request) => Some(*request),
        _ => None,
    })
}

fn ic_response_bytes(response: nvme_tcp_wire::InitializeConnectionResponse) -> Vec<u8> {
    let mut bytes = Vec::new();
    PduWriter::new().write_header(&PduHeader::IcResp(response), 0, &mut bytes);
    bytes
}

#[test]
fn icresp_with_wrong_version_is_refused() {
    let (mut host, mut target, now) = new_queue(NO_DIGESTS);
    target.take_from(&mut host);
    let response = nvme_tcp_wire::InitializeConnectionResponse {
        protocol_format_version: 1,
        ..FakeTarget::ic_response(NO_DIGESTS)
    };
    host.handle_received(&ic_response_bytes(response), now);
    assert_eq!(host.state(), QueueState::Failed);
    assert_eq!(
        host.error(),
        Some(&HostError::BadIcResp { reason: IcRespProblem::Malformed(ReadErrorKind::UnsupportedVersion(1)) })
    );
    assert_eq!(host.error().unwrap().origin(), FaultOrigin::Target);
    let termination = sent_termination(&mut host, &mut target).expect("H2CTermReq");
    assert_eq!(termination.status, FatalErrorStatus::UnsupportedParameter);
}

#[test]
fn icresp_must_echo_the_digests() {
    let requested = DigestSettings { header: true, data: true };
    let (mut host, mut target, now) = new_queue(requested);
    target.take_from(&mut host);
    host.handle_received(&ic_response_bytes(FakeTarget::ic_response(NO_DIGESTS)), now);
    assert_eq!(
        host.error(),
        Some(&HostError::BadIcResp { reason: IcRespProblem::DigestsNotEchoed { requested, granted: NO_DIGESTS } })
    );
    assert!(host.error().unwrap().to_string().starts_with("target sent a bad ICResp"));
}

#[test]
fn icresp_with_unusable_maxh2cdata_is_refused() {
    for (max, expected) in
        [(0, IcRespProblem::Malformed(ReadErrorKind::BadMaxH2cData(0))), (1024, IcRespProblem::MaxH2cData(1024))]
    {
        let (mut host, mut target, now) = new_queue(NO_DIGESTS);
        target.take_from(&mut host);
        let response = nvme_tcp_wire::InitializeConnectionResponse {
            max_h2c_data_bytes: max,
            ..FakeTarget::ic_response(NO_DIGESTS)
        };
        host.handle_received(&ic_response_bytes(response), now);
        assert_eq!(host.error(), Some(&HostError::BadIcResp { reason: expected }));
    }
}

#[test]
fn rejected_connect_fails_the_queue_with_the_status() {
    let (mut host, mut target, now) = new_queue(NO_DIGESTS);
    target.take_from(&mut host);
    host.handle_received(&ic_response_bytes(FakeTarget::ic_response(NO_DIGESTS)), now);
    assert_eq!(host.state(), QueueState::Connecting);
    target.take_from(&mut host);
    let status = Status::CONNECT_INVALID_PARAMETERS.with_do_not_retry();
    host.handle_received(&target.pdu(FakeTarget::response(0, status, 0x0001_0010), &[]), now);
    assert_eq!(host.error(), Some(&HostError::ConnectRejected { status, dw0: 0x0001_0010 }));
    assert!(host.error().unwrap().to_string().contains("Connect invalid parameters"));
    let refused = host.submit(commands::flush(NAMESPACE), now).unwrap_err();
    assert!(matches!(refused, nvme_host::SubmitError::NotReady(_)));
}

#[test]
fn admin_connect_with_a_reserved_cntlid_is_refused() {
    let now = Instant::now();
    let mut host = HostQueue::new(admin_config(NO_DIGESTS), now);
    let mut target = FakeTarget::default();
    target.take_from(&mut host);
    host.handle_received(&ic_response_bytes(FakeTarget::ic_response(NO_DIGESTS)), now);
    target.take_from(&mut host);
    host.handle_received(&target.pdu(FakeTarget::response(0, Status::SUCCESS, 0xFFFF), &[]), now);
    assert!(matches!(host.error(), Some(HostError::BadConnectResponse { dw0: 0xFFFF, .. })));
}

fn c2h(command_id: u16, offset: u32, length: u32, last: bool, success: bool) -> PduHeader {
    PduHeader::C2hData(DataHeader {
        command_id: nvme_spec::CommandId(command_id),
        transfer_tag: 0,
        data_offset: offset,
        data_length: length,
        last,
        success,
    })
}

/// Submits a 1 KiB read and returns its CID.
fn submit_read(host: &mut HostQueue, target: &mut FakeTarget, now: Instant) -> u16 {
    host.submit(commands::read(NAMESPACE, 0, 2, BLOCK_BYTES), now).unwrap();
    target.take_from(host);
    target.last_command().command_id().0
}

#[test]
fn data_for_an_unknown_command_fails_the_queue() {
    let (mut host, target, now) = ready_queue(NO_DIGESTS);
    host.handle_received(&target.pdu(c2h(5, 0, 4, true, false), &[1, 2, 3, 4]), now);
    assert!(matches!(host.error(), Some(HostError::UnknownCommandId { command_id: 5, .. })));
}

#[test]
fn response_for_an_unknown_command_fails_the_queue() {
    let (mut host, target, now) = ready_queue(NO_DIGESTS);
    host.handle_received(&target.pdu(FakeTarget::response(3, Status::SUCCESS, 0), &[]), now);
    assert!(matches!(host.error(), Some(HostError::UnknownCommandId { command_id: 3, .. })));
}

#[test]
fn data_beyond_the_command_length_fails_the_queue() {
    let (mut host, mut target, now) = ready_queue(NO_DIGESTS);
    let cid = submit_read(&mut host, &mut target, now);
    host.handle_received(&target.pdu(c2h(cid, 512, 1024, true, false), &[0; 1024]), now);
    assert!(matches!(host.error(), Some(HostError::DataOutOfRange { limit: 1024, .. })));
    let termination = sent_termination(&mut host, &mut target).expect("H2CTermReq");
    assert_eq!(termination.status, FatalErrorStatus::DataTransferOutOfRange);
    // The outstanding read is handed back for a retry elsewhere.
    let back = host.abandon(HostError::ConnectionLost);
    assert_eq!(back.len(), 1);
    assert!(matches!(host.error(), Some(HostError::DataOutOfRange { .. })), "the first error is kept");
}

#[test]
fn out_of_order_data_fails_the_queue() {
    let (mut host, mut target, now) = ready_queue(NO_DIGESTS);
    let cid = submit_read(&mut host, &mut target, now);
    host.handle_received(&target.pdu(c2h(cid, 512, 512, true, false), &[0; 512]), now);
    assert!(matches!(host.error(), Some(HostError::DataOutOfRange { offset: 512, expected_offset: 0, .. })));
}

#[test]
fn short_data_completes_the_command_with_an_error() {
    let (mut host, mut target, now) = ready_queue(NO_DIGESTS);
    let cid = submit_read(&mut host, &mut target, now);
    let mut bytes = target.pdu(c2h(cid, 0, 512, false, false), &[9; 512]);
    bytes.extend(target.pdu(FakeTarget::response(cid, Status::SUCCESS, 0), &[]));
    host.handle_received(&bytes, now);
    let completion = host.poll_completion().expect("completion");
    assert_eq!(completion.cqe.status, Status::DATA_TRANSFER_ERROR);
    assert_eq!(
        completion.transport_error,
        Some(HostError::ShortData { command_id: cid, received: 512, expected: 1024 })
    );
    assert_eq!(completion.data, vec![9; 512]);
    assert!(matches!(host.state(), QueueState::Ready { .. }), "per command, not fatal");
}

#[test]
fn success_flag_completes_without_a_response() {
    let (mut host, mut target, now) = ready_queue(NO_DIGESTS);
    let cid = submit_read(&mut host, &mut target, now);
    let mut bytes = target.pdu(c2h(cid, 0, 1000, false, false), &[1; 1000]);
    bytes.extend(target.pdu(c2h(cid, 1000, 24, true, true), &[2; 24]));
    host.handle_received(&bytes, now);
    let completion = host.poll_completion().expect("completion");
    assert!(completion.cqe.status.is_success());
    assert_eq!(completion.cqe.command_id.0, cid);
    assert_eq!(completion.data.len(), 1024);
    assert_eq!(host.outstanding(), 0);
}

#[test]
fn data_digest_error_fails_only_that_command() {
    let (mut host, mut target, now) = ready_queue(DATA_DIGESTS);
    let cid = submit_read(&mut host, &mut target, now);
    let mut bytes = target.pdu(c2h(cid, 0, 1024, true, false), &[5; 1024]);
    let length = bytes.len();
    bytes[length - 1] ^= 0xFF; // corrupt DDGST
    bytes.extend(target.pdu(FakeTarget::response(cid, Status::SUCCESS, 0), &[]));
    host.handle_received(&bytes, now);
    let completion = host.poll_completion().expect("completion");
    assert_eq!(completion.cqe.status, Status::DATA_TRANSFER_ERROR);
    assert_eq!(completion.transport_error, Some(HostError::DataDigestMismatch { command_id: cid }));
    assert!(matches!(host.state(), QueueState::Ready { .. }));
}

#[test]
fn header_digest_error_is_fatal() {
    let digests = DigestSettings { header: true, data: false };
    let (mut host, mut target, now) = ready_queue(digests);
    let cid = submit_read(&mut host, &mut target, now);
    let mut bytes = target.pdu(FakeTarget::response(cid, Status::SUCCESS, 0), &[]);
    bytes[10] ^= 1;
    host.handle_received(&bytes, now);
    assert!(matches!(host.error(), Some(HostError::HeaderDigestMismatch { .. })));
    let termination = sent_termination(&mut host, &mut target).expect("H2CTermReq");
    assert_eq!(termination.status, FatalErrorStatus::HeaderDigestError);
}

#[test]
fn termination_request_from_the_target() {
    let (mut host, mut target, now) = ready_queue(NO_DIGESTS);
    submit_read(&mut host, &mut target, now);
    let request = TerminationRequest::new(FatalErrorStatus::PduSequenceError, 0, &[]);
    host.handle_received(&target.pdu(PduHeader::C2hTermReq(request), &[]), now);
    assert_eq!(
        host.error(),
        Some(&HostError::TerminatedByTarget { status: FatalErrorStatus::PduSequenceError, info: 0 })
    );
    assert!(sent_termination(&mut host, &mut target).is_none(), "a TermReq is never answered");
    assert_eq!(host.abandon(HostError::ConnectionLost).len(), 1);
}

fn r2t(command_id: u16, offset: u32, length: u32) -> PduHeader {
    PduHeader::R2t(ReadyToTransfer { command_id: nvme_spec::CommandId(command_id), transfer_tag: 3, offset, length })
}

#[test]
fn r2t_is_answered_in_maxh2cdata_pieces() {
    let (mut host, mut target, now) = new_queue(NO_DIGESTS);
    target.take_from(&mut host);
    let response =
        nvme_tcp_wire::InitializeConnectionResponse { max_h2c_data_bytes: 4096, ..FakeTarget::ic_response(NO_DIGESTS) };
    host.handle_received(&ic_response_bytes(response), now);
    target.take_from(&mut host);
    host.handle_received(&target.pdu(FakeTarget::response(0, Status::SUCCESS, 0), &[]), now);
    let data = pattern(16 * 1024, 1);
    host.submit(commands::write(NAMESPACE, 0, data.clone(), BLOCK_BYTES, false), now).unwrap();
    target.take_from(&mut host);
    let cid = target.last_command().command_id().0;
    assert!(target.last_command().sgl().is_transport(), "16 KiB > 8 KiB in-capsule default");
    target.received.clear();
    host.handle_received(&target.pdu(r2t(cid, 0, 10_000), &[]), now);
    target.take_from(&mut host);
    let pieces: Vec<DataHeader> = target
        .received
        .iter()
        .map(|(header, payload)| match header {
            PduHeader::H2cData(data) => {
                assert_eq!(payload.len() as u32, data.data_length);
                *data
            }
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(pieces.iter().map(|piece| piece.data_length).collect::<Vec<_>>(), [4096, 4096, 1808]);
    assert_eq!(pieces.iter().map(|piece| piece.last).collect::<Vec<_>>(), [false, false, true]);
    assert!(pieces.iter().all(|piece| piece.transfer_tag == 3));
    // The next R2T must continue where the last one ended.
    host.handle_received(&target.pdu(r2t(cid, 12_000, 1000), &[]), now);
    assert!(matches!(host.error(), Some(HostError::DataOutOfRange { expected_offset: 10_000, .. })));
}

#[test]
fn bad_r2ts_fail_the_queue() {
    // Beyond the data.
    let (mut host, mut target, now) = ready_queue(NO_DIGESTS);
    host.submit(commands::write(NAMESPACE, 0, vec![0; 16384], BLOCK_BYTES, false), now).unwrap();
    target.take_from(&mut host);
    let cid = target.last_command().command_id().0;
    host.handle_received(&target.pdu(r2t(cid, 0, 16385), &[]), now);
    assert!(matches!(host.error(), Some(HostError::DataOutOfRange { .. })));

    // Too many at once (MAXR2T 0: one).
    let (mut host, mut target, now) = ready_queue(NO_DIGESTS);
    host.submit(commands::write(NAMESPACE, 0, vec![0; 16384], BLOCK_BYTES, false), now).unwrap();
    target.take_from(&mut host);
    let cid = target.last_command().command_id().0;
    let mut bytes = target.pdu(r2t(cid, 0, 4096), &[]);
    bytes.extend(target.pdu(r2t(cid, 4096, 4096), &[]));
    host.handle_received(&bytes, now);
    assert_eq!(host.error(), Some(&HostError::R2tLimitExceeded { command_id: cid, limit: 1 }));

    // For a command whose data went in-capsule.
    let (mut host, mut target, now) = ready_queue(NO_DIGESTS);
    host.submit(commands::write(NAMESPACE, 0, vec![0; 512], BLOCK_BYTES, false), now).unwrap();
    target.take_from(&mut host);
    let cid = target.last_command().command_id().0;
    host.handle_received(&target.pdu(r2t(cid, 0, 512), &[]), now);
    assert!(matches!(host.error(), Some(HostError::UnexpectedPdu { .. })));
}

#[test]
fn a_stalled_command_times_out() {
    let (mut host, mut target, now) = ready_queue(NO_DIGESTS);
    let cid = submit_read(&mut host, &mut target, now);
    let deadline = host.next_deadline().expect("a deadline");
    assert_eq!(deadline, later(now, 30_000));
    host.handle_timeout(later(now, 29_999));
    assert!(matches!(host.state(), QueueState::Ready { .. }));
    host.handle_timeout(deadline);
    assert_eq!(host.error(), Some(&HostError::CommandTimeout { command_id: cid }));
    assert_eq!(host.error().unwrap().origin(), FaultOrigin::Transport);
    let back = host.abandon(HostError::ConnectionLost);
    assert_eq!(back[0].sqe.command_id().0, cid, "the timed-out command can be picked out");
}

#[test]
fn a_silent_target_times_out_the_setup() {
    let (mut host, _target, now) = new_queue(NO_DIGESTS);
    host.handle_timeout(later(now, 30_000));
    assert_eq!(host.error(), Some(&HostError::SetupTimeout { waiting_for: "ICResp" }));
}

#[test]
fn dropped_connection_hands_commands_back() {
    let (mut host, mut target, now) = ready_queue(NO_DIGESTS);
    submit_read(&mut host, &mut target, now);
    host.submit(commands::flush(NAMESPACE), now).unwrap();
    let back = host.abandon(HostError::ConnectionLost);
    assert_eq!(back.len(), 2);
    assert_eq!(host.error(), Some(&HostError::ConnectionLost));
    assert_eq!(host.next_deadline(), None);
}

#[test]
fn data_before_connect_is_a_sequence_error() {
    let (mut host, mut target, now) = new_queue(NO_DIGESTS);
    target.take_from(&mut host);
    host.handle_received(&ic_response_bytes(FakeTarget::ic_response(NO_DIGESTS)), now);
    host.handle_received(&target.pdu(c2h(0, 0, 4, true, false), &[0; 4]), now);
    assert!(matches!(host.error(), Some(HostError::UnexpectedPdu { .. })));
}

proptest! {
    /// Garbage after a good bring-up never panics; the queue either stays usable or
    /// fails with an error, and keeps saying so.
    #[test]
    fn garbage_never_panics(garbage in proptest::collection::vec(any::<u8>(), 0..600), split in 0usize..600, read in any::<bool>()) {
        let (mut host, mut target, now) = ready_queue(NO_DIGESTS);
        if read {
            submit_read(&mut host, &mut target, now);
        }
        let split = split.min(garbage.len());
        host.handle_received(&garbage[..split], now);
        host.handle_received(&garbage[split..], now);
        let mut out = Vec::new();
        host.transmit(&mut out);
        if host.state() == QueueState::Failed {
            prop_assert!(host.error().is_some());
        }
        host.handle_timeout(later(now, 60_000));
        let _ = host.abandon(HostError::ConnectionLost);
        prop_assert_eq!(host.outstanding(), 0);
    }

    /// Well-formed PDUs with random fields never panic either.
    #[test]
    fn random_pdus_never_panic(
        pdus in proptest::collection::vec((0u8..4, any::<u16>(), any::<u32>(), 1u32..2048, any::<bool>(), any::<bool>()), 1..8),
    ) {
        let (mut host, mut target, now) = ready_queue(DATA_DIGESTS);
        submit_read(&mut host, &mut target, now);
        host.submit(commands::write(NAMESPACE, 0, vec![1; 16384], BLOCK_BYTES, false), now).unwrap();
        for (kind, command_id, offset, length, last, success) in pdus {
            let command_id = command_id % 4;
            let bytes = match kind {
                0 => target.pdu(c2h(command_id, offset % 2048, length, last, success && last), &vec![0; length as usize]),
                1 => target.pdu(r2t(command_id, offset % 20_000, length * 8), &[]),
                2 => target.pdu(FakeTarget::response(command_id, Status::from_field(offset as u16), 0), &[]),
                _ => target.pdu(PduHeader::C2hTermReq(TerminationRequest::new(FatalErrorStatus::PduSequenceError, offset, &[])), &[]),
            };
            host.handle_received(&bytes, now);
            let mut out = Vec::new();
            host.transmit(&mut out);
            while host.poll_completion().is_some() {}
        }
    }
}
