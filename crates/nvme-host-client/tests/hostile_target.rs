//! The host library against a broken or hostile target (`hostile/mod.rs`): a fake
//! NVMe/TCP target that answers as the spec says until a chosen command, and then
//! misbehaves every time that command comes. Each case must end within the
//! host's documented bound (every command: at most 5 resends, over by command
//! timeout + controller loss timeout after its first submission) with an error
//! naming what the target did, never a hang, a panic or memory without bound.

mod hostile;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use hostile::{Fault, HostileTarget, Misdeed, Trigger, BLOCK_BYTES, NQN};
use nvme_host_client::{ClientError, ConnectOptions, Controller, IoPath};
use nvme_spec::NamespaceId;
use nvme_tcp_wire::FatalErrorStatus;

const COMMAND_TIMEOUT: Duration = Duration::from_millis(1500);
const CONTROLLER_LOSS_TIMEOUT: Duration = Duration::from_secs(3);

/// Short timeouts, so that every bound below is a few seconds.
fn options(address: SocketAddr) -> ConnectOptions {
    let mut options = ConnectOptions::new(address, NQN);
    options.io_queues = 1;
    options.queue_size = 32;
    options.command_timeout = COMMAND_TIMEOUT;
    options.connect_timeout = Duration::from_secs(1);
    options.reconnect_delay = Duration::from_millis(20);
    options.controller_loss_timeout = CONTROLLER_LOSS_TIMEOUT;
    options.keep_alive_timeout_ms = 2000;
    options.io_path = IoPath::Blocking;
    options
}

/// The documented bound of one command, plus room for connecting and for a
/// loaded 2-core machine.
fn command_bound() -> Duration {
    COMMAND_TIMEOUT + CONTROLLER_LOSS_TIMEOUT + Duration::from_secs(3)
}

fn connect(target: &HostileTarget) -> Controller {
    Controller::connect(options(target.address)).expect("the target behaves until its trigger")
}

/// Runs `call`, checks it failed within the bound, and returns its message.
fn failure<T: std::fmt::Debug>(what: &str, call: impl FnOnce() -> Result<T, ClientError>) -> String {
    let started = Instant::now();
    let result = call();
    let elapsed = started.elapsed();
    assert!(elapsed < command_bound(), "{what} took {elapsed:?}, bound {:?}", command_bound());
    let error = result.expect_err("a broken target cannot make a command succeed");
    eprintln!("{what}: failed after {elapsed:?}: {error}");
    error.to_string()
}

#[test]
fn a_namespace_list_above_nn_is_refused_at_once() {
    let target = HostileTarget::start(Fault::NamespaceListFlood);
    let controller = connect(&target);
    let message = failure("active namespace list", || controller.active_namespaces());
    assert!(message.contains("NSID 2 is above the highest NSID the controller reports (NN 1)"), "{message}");
    // One page at connect, one now: the host never paged on.
    assert!(target.misdeeds() <= 2 + 2, "{} pages served", target.misdeeds());
}

#[test]
fn an_admin_command_the_target_resets_for_gives_up_after_five_resends() {
    let target = HostileTarget::start(Fault::On(Trigger::NamespaceList, Misdeed::Reset));
    let controller = connect(&target);
    let before = target.misdeeds();
    let message = failure("active namespace list", || controller.active_namespaces());
    assert!(message.contains("the target reset the connection on every retry (5 reconnects)"), "{message}");
    assert_eq!(target.misdeeds() - before, 6, "sent once and resent 5 times");
}

#[test]
fn a_termination_request_for_the_smart_log_is_named_with_its_fes_and_offset() {
    let status = FatalErrorStatus::InvalidPduHeaderField;
    let target = HostileTarget::start(Fault::On(Trigger::SmartLog, Misdeed::TermReq { status, info: 16 }));
    let controller = connect(&target);
    let message = failure("smart log", || controller.smart_log());
    assert!(
        message.contains(
            "the target ended the connection with C2HTermReq FES 0x01 (invalid PDU header field) at offset 16 on \
             every retry (5 reconnects)"
        ),
        "{message}"
    );
}

#[test]
fn asynchronous_events_completed_twice_end_in_an_error_naming_the_stray_completion() {
    let target = HostileTarget::start(Fault::AsyncEventCompletedTimes(2));
    // Connect's own commands may already meet the stray completion and resend.
    let controller = match Controller::connect(options(target.address)) {
        Ok(controller) => controller,
        Err(error) => panic!("connect: {error}"),
    };
    let message = failure("active namespace list", || controller.active_namespaces());
    assert!(message.contains("which is not outstanding"), "{message}");
    assert!(message.contains("reconnects"), "{message}");
}

/// A read the target answers wrongly every time: the error names the fault.
fn read_fault(misdeed: Misdeed, header_digest: bool, data_digest: bool, expected: &str) {
    let target = HostileTarget::start(Fault::On(Trigger::Read, misdeed));
    let mut options = options(target.address);
    options.header_digest = header_digest;
    options.data_digest = data_digest;
    let controller = Controller::connect(options).expect("connect");
    let message = failure(&format!("read ({misdeed:?})"), || controller.read(NamespaceId(1), 0, 8));
    assert!(message.contains(expected), "{misdeed:?}: {message}");
    assert!(!message.contains("timed out"), "{misdeed:?}: {message}");
}

#[test]
fn a_read_answered_with_a_termination_request_names_it() {
    let status = FatalErrorStatus::PduSequenceError;
    read_fault(Misdeed::TermReq { status, info: 0 }, false, false, "C2HTermReq FES 0x02 (PDU sequence error");
}

#[test]
fn a_read_answered_with_a_reset_names_it() {
    read_fault(Misdeed::Reset, false, false, "the target reset the connection on every retry (5 reconnects)");
}

#[test]
fn a_read_answered_with_half_a_pdu_names_it() {
    read_fault(Misdeed::CloseMidPdu, false, false, "closed the connection in the middle of a PDU on every retry");
}

#[test]
fn a_read_answered_with_an_r2t_names_it() {
    read_fault(Misdeed::R2t, false, false, "R2t out of place: R2T for a command without R2T data on every retry");
}

#[test]
fn a_read_answered_with_a_huge_pdu_names_it() {
    read_fault(Misdeed::HugePduLength, false, false, "target sent an invalid PDU");
}

#[test]
fn a_read_answered_with_a_bad_header_digest_names_it() {
    read_fault(Misdeed::BadHeaderDigest, true, false, "PDU header with a bad digest");
}

#[test]
fn a_read_answered_without_its_data_digest_names_it() {
    read_fault(Misdeed::MissingDataDigest, false, true, "target sent an invalid PDU");
}

#[test]
fn a_read_answered_with_an_r2t_for_another_command_names_it() {
    read_fault(Misdeed::R2tForUnknownCommand, false, false, "which is not outstanding on every retry");
}

#[test]
fn a_write_answered_with_read_data_names_it() {
    let target = HostileTarget::start(Fault::On(Trigger::Write, Misdeed::C2hData));
    let controller = connect(&target);
    let data = vec![0x5Au8; 8 * BLOCK_BYTES as usize];
    let message = failure("write", || controller.write(NamespaceId(1), 0, &data, false));
    assert!(message.contains("C2HData for a command that reads no data"), "{message}");
    assert!(message.contains("on every retry (5 reconnects)"), "{message}");
}

#[test]
fn a_target_that_never_sets_ready_is_given_the_connect_timeout_not_cap_to() {
    let target = HostileTarget::start(Fault::NeverReady);
    let mut options = options(target.address);
    options.connect_timeout = Duration::from_millis(700);
    let started = Instant::now();
    let error = Controller::connect(options).expect_err("never ready");
    let elapsed = started.elapsed();
    assert!(elapsed < Duration::from_secs(3), "took {elapsed:?} (CAP.TO says 127.5 s)");
    let message = error.to_string();
    assert!(message.contains("did not set CSTS.RDY"), "{message}");
    assert!(message.contains("CAP.TO allows 127500 ms"), "{message}");
}

#[test]
fn a_target_that_goes_silent_ends_a_read_in_a_timeout() {
    let target = HostileTarget::start(Fault::SilentAfterIo(0));
    let controller = connect(&target);
    let started = Instant::now();
    let error = controller.read(NamespaceId(1), 0, 8).expect_err("no answer");
    assert!(started.elapsed() < command_bound(), "took {:?}", started.elapsed());
    assert!(matches!(error, ClientError::Timeout), "{error}");
}

#[test]
fn a_correct_fake_target_serves_reads_and_writes() {
    let target = HostileTarget::start(Fault::None);
    let controller = connect(&target);
    assert_eq!(controller.active_namespaces().expect("list"), vec![NamespaceId(1)]);
    let data: Vec<u8> = (0..64 * BLOCK_BYTES).map(|index| (index % 251) as u8).collect();
    controller.write(NamespaceId(1), 8, &data, false).expect("write (R2T)");
    controller.write(NamespaceId(1), 0, &data[..4096], false).expect("write (in capsule)");
    assert!(controller.read(NamespaceId(1), 8, 64).expect("read") == data);
    controller.smart_log().expect("smart log");
    controller.disconnect().expect("disconnect");
}
