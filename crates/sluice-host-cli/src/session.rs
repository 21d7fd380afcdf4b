//! What every host subcommand shares: the connected controller (`Session`), the one-
//! line errors naming what failed and what to do, and printing to stdout. The
//! subcommand files (`commands`, `ana`, `namespaces`, `paths`, `reservations`) import
//! from here and never from each other's dispatch, so the host CLI has no import
//! circle.

use std::io::{self, Write};

use nvme_host_client::{ClientError, Controller};
use nvme_spec::{IdentifyNamespace, NamespaceId, Status};
use serde_json::Value;

use super::args::{Purpose, Target, TargetArgs};
use super::output::{describe_status, StatusContext};
use super::HostError;

/// What a client error amounts to, for the message and its hint.
enum Failure<'a> {
    /// The target answered with an NVMe status (DW0 for a refused Connect).
    Status { status: Status, dw0: Option<u32> },
    /// The TCP connection could not be made or broke.
    Io(&'a io::Error),
    /// Nothing answered in time.
    Timeout,
    /// Anything else: the client's own message says it.
    Other,
}

fn classify(error: &ClientError) -> Failure<'_> {
    match error {
        ClientError::Command { status, .. } => Failure::Status { status: *status, dw0: None },
        ClientError::Protocol(nvme_host::HostError::ConnectRejected { status, dw0 }) => {
            Failure::Status { status: *status, dw0: Some(*dw0) }
        }
        ClientError::Connect { source, .. } | ClientError::Io { source, .. } => Failure::Io(source),
        ClientError::Timeout
        | ClientError::Protocol(nvme_host::HostError::SetupTimeout { .. })
        | ClientError::Protocol(nvme_host::HostError::CommandTimeout { .. }) => Failure::Timeout,
        _ => Failure::Other,
    }
}

/// "cannot connect to ADDR (subsystem NQN): REASON: HINT".
pub(super) fn connect_error(target: &Target, error: ClientError) -> HostError {
    let place = if target.purpose == Purpose::Discovery {
        target.address.to_string()
    } else {
        format!("{} subsystem {}", target.address, target.nqn)
    };
    match classify(&error) {
        // The network failed before any NQN mattered: name the address only.
        Failure::Io(io) => {
            HostError::runtime(format!("cannot connect to {}: {}", target.address, io_reason(io, target)))
        }
        Failure::Status { status, dw0 } => {
            let hint = connect_status_hint(status, dw0, target);
            HostError::runtime(format!(
                "cannot connect to {place}: {}{hint}",
                describe_status(status, StatusContext::Fabrics)
            ))
        }
        Failure::Timeout => HostError::runtime(format!(
            "cannot connect to {}: no answer in time: is the address right, the port reachable and the target an NVMe/TCP target?",
            target.address
        )),
        Failure::Other => {
            let hint = match &error {
                // The target answered as an NVMe/TCP target does; the message says why.
                ClientError::Protocol(
                    nvme_host::HostError::Authentication { .. } | nvme_host::HostError::BadConnectResponse { .. },
                ) => String::new(),
                ClientError::Protocol(_) => format!(": is {} an NVMe/TCP port?", target.address),
                _ => String::new(),
            };
            HostError::runtime(format!("cannot connect to {place}: {}{hint}", client_reason(&error)))
        }
    }
}

/// The client's message without its own "cannot connect to ADDR:" prefix.
fn client_reason(error: &ClientError) -> String {
    match error {
        ClientError::Connect { source, .. } | ClientError::Io { source, .. } => source.to_string(),
        other => other.to_string(),
    }
}

fn io_reason(io: &io::Error, target: &Target) -> String {
    let port = target.address.port();
    match io.kind() {
        io::ErrorKind::ConnectionRefused if target.purpose == Purpose::Discovery => format!(
            "connection refused: is `sluice serve` running with a listener on port {port}? (discovery listens on 8009 by default; -s picks the port)"
        ),
        io::ErrorKind::ConnectionRefused => {
            format!("connection refused: is `sluice serve` running and listening on port {port}?")
        }
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => {
            "no answer in time: is the address right and the port reachable?".to_string()
        }
        io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionAborted | io::ErrorKind::UnexpectedEof => {
            format!("the target closed the connection ({io}): check the target's log")
        }
        _ => format!("{io}: is the address right and the port reachable?"),
    }
}

fn connect_status_hint(status: Status, dw0: Option<u32>, target: &Target) -> String {
    let discover = format!("`sluice discover -a {}` lists the target's subsystems", target.address.ip());
    match (status.code_type(), status.code()) {
        (0x1, 0x82) => {
            // IATTR bit 16: 1 = in the Connect data; IPO bits 15:0: byte offset.
            match dw0.map(|dw0| ((dw0 >> 16) & 1, dw0 & 0xFFFF)) {
                Some((1, 512)) => format!(": the host NQN {:?} was refused (-q)", target.host_nqn),
                Some((0, 44)) => ": the queue size was refused (--queue-size)".to_string(),
                Some((1, 16)) => {
                    ": the target refused the controller ID (it may not support the dynamic controller model)"
                        .to_string()
                }
                Some((1, 256)) | None => format!(": is the subsystem NQN {:?} right? {discover}", target.nqn),
                Some((in_data, offset)) => format!(
                    ": the target refused the Connect {} at byte {offset}",
                    if in_data == 1 { "data" } else { "command" }
                ),
            }
        }
        (0x1, 0x84) => format!(": the target does not allow host NQN {:?} (-q)", target.host_nqn),
        (0x1, 0x81) => ": the target has no controller left; try again later".to_string(),
        (0x1, 0x91) => ": the target requires DH-HMAC-CHAP authentication (--dhchap-secret)".to_string(),
        (0x0, 0x1A) => ": the target refused the keep-alive timeout (-k)".to_string(),
        _ => String::new(),
    }
}

/// "WHAT failed: STATUS: HINT" for a command on a connected controller.
pub(super) fn command_error(
    what: &str,
    error: ClientError,
    context: StatusContext,
    hint: impl FnOnce(Status) -> String,
) -> HostError {
    match classify(&error) {
        Failure::Status { status, .. } => {
            let hint = hint(status);
            let hint = if hint.is_empty() { hint } else { format!(": {hint}") };
            HostError::runtime(format!("{what} failed: {}{hint}", describe_status(status, context)))
        }
        Failure::Io(io) => HostError::runtime(format!("{what} failed: connection lost ({io})")),
        Failure::Timeout => HostError::runtime(format!("{what} failed: no answer in time (see --timeout)")),
        Failure::Other => HostError::runtime(format!("{what} failed: {}", client_reason(&error))),
    }
}

pub(super) fn no_hint(_: Status) -> String {
    String::new()
}

pub(super) fn namespace_hint(nsid: u32) -> impl FnOnce(Status) -> String {
    move |status| match (status.code_type(), status.code()) {
        (0x0, 0x0B) => format!("namespace {nsid} is not active; `sluice list-ns` lists the active ones"),
        _ => String::new(),
    }
}

// ---------------------------------------------------------------------------------
// Sessions

/// A connected controller that disconnects when dropped.
pub(super) struct Session {
    controller: Option<Controller>,
    pub(super) target: Target,
}

impl Session {
    pub(super) fn open(args: &TargetArgs) -> Result<Self, HostError> {
        Self::connect(args.resolve(Purpose::Subsystem)?)
    }

    pub(super) fn connect(mut target: Target) -> Result<Self, HostError> {
        let options = target.take_options();
        let controller = Controller::connect(options).map_err(|error| connect_error(&target, error))?;
        Ok(Self { controller: Some(controller), target })
    }

    pub(super) fn controller(&self) -> &Controller {
        self.controller.as_ref().expect("the controller is there until the session is dropped")
    }

    pub(super) fn identify_namespace(&self, nsid: u32) -> Result<IdentifyNamespace, HostError> {
        self.controller()
            .identify_namespace(NamespaceId(nsid))
            .map_err(|error| command_error("identify namespace", error, StatusContext::Admin, namespace_hint(nsid)))
    }

    pub(super) fn active_namespaces(&self) -> Result<Vec<u32>, HostError> {
        self.controller()
            .active_namespaces()
            .map(|list| list.into_iter().map(|nsid| nsid.0).collect())
            .map_err(|error| command_error("active namespace list", error, StatusContext::Admin, no_hint))
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Some(controller) = self.controller.take() {
            if let Err(error) = controller.disconnect() {
                tracing::debug!(%error, "disconnect failed");
            }
        }
    }
}

pub(super) fn print_json(value: &Value) -> Result<(), HostError> {
    let text = serde_json::to_string_pretty(value).expect("a serde_json::Value always serializes");
    print_text(&format!("{text}\n"))
}

pub(super) fn print_text(text: &str) -> Result<(), HostError> {
    let mut stdout = io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(|error| HostError::runtime(format!("cannot write to stdout: {error}")))
}
