//! One held controller: its admin and I/O connections (std sockets in non-blocking
//! mode, each with nvme-host's sans-io queue), brought up step by step as the Linux
//! host brings one up, then kept alive.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use nvme_host::{commands, HostCommand, HostCompletion, HostQueue, QueueConfig, QueueState, StatusDisplay};
use nvme_spec::fabrics::property_offset;
use nvme_spec::features::{feature_id, number_of_queues_request};
use nvme_spec::identify::{cns, csi, IDENTIFY_DATA_BYTES};
use nvme_spec::{
    ControllerCapabilities, ControllerConfiguration, ControllerId, ControllerStatus, IdentifyController,
    IdentifyNamespace, NamespaceId, QueueId,
};
use nvme_tcp_wire::DigestSettings;

use super::options::{HoldOptions, ADMIN_QUEUE_ENTRIES, IO_QUEUE_ENTRIES, READ_BYTES};

/// Pause between two CSTS reads while waiting for RDY.
const READY_POLL_INTERVAL: Duration = Duration::from_millis(1);
/// errno EMFILE and ENFILE on Linux: out of file descriptors.
const EMFILE: i32 = 24;
const ENFILE: i32 = 23;
/// User tags of the admin commands (bring-up commands have 0).
const KEEP_ALIVE_TAG: u64 = 1;
const ASYNC_EVENT_TAG: u64 = u64::MAX;

/// One TCP connection and the queue on it.
struct Link {
    stream: TcpStream,
    queue: HostQueue,
    /// Bytes the queue produced that the socket has not taken yet.
    unsent: Vec<u8>,
}

impl Link {
    /// Connects (blocking, at most `timeout`) and sends ICReq.
    fn connect(address: SocketAddr, config: QueueConfig, timeout: Duration) -> io::Result<Link> {
        let stream = TcpStream::connect_timeout(&address, timeout)?;
        // As the Linux host does: every PDU goes out at once.
        stream.set_nodelay(true)?;
        stream.set_nonblocking(true)?;
        let mut link = Link { stream, queue: HostQueue::new(config, Instant::now()), unsent: Vec::new() };
        link.flush()?;
        Ok(link)
    }

    /// Hands the queue's pending PDUs to the socket, as much as it takes now.
    fn flush(&mut self) -> io::Result<()> {
        self.queue.transmit(&mut self.unsent);
        let mut written = 0;
        while written < self.unsent.len() {
            match self.stream.write(&self.unsent[written..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(bytes) => written += bytes,
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => break,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => return Err(error),
            }
        }
        self.unsent.drain(..written);
        if self.unsent.is_empty() && self.unsent.capacity() > 4096 {
            // An idle connection keeps no big buffer (the Connect data, a read's...).
            self.unsent = Vec::new();
        }
        Ok(())
    }

    /// Feeds the queue what the socket has; `true` when anything came.
    fn receive(&mut self, buffer: &mut [u8], now: Instant) -> io::Result<bool> {
        let mut received = false;
        loop {
            match self.stream.read(buffer) {
                Ok(0) => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the target closed the connection")),
                Ok(bytes) => {
                    received = true;
                    self.queue.handle_received(&buffer[..bytes], now);
                    if bytes < buffer.len() {
                        break;
                    }
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => break,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => return Err(error),
            }
        }
        Ok(received)
    }

    /// Receives, runs the queue's timers and sends what that produced; an error
    /// when the connection or its queue failed.
    fn service(&mut self, what: &str, buffer: &mut [u8], now: Instant) -> Result<bool, String> {
        let received = self.receive(buffer, now).map_err(|error| format!("{what} connection: {error}"))?;
        self.queue.handle_timeout(now);
        if self.queue.state() == QueueState::Failed {
            let error = self.queue.error().map_or_else(|| "failed".to_string(), ToString::to_string);
            return Err(format!("{what} queue: {error}"));
        }
        self.flush().map_err(|error| format!("{what} connection: {error}"))?;
        Ok(received)
    }

    fn submit(&mut self, command: HostCommand, what: &str, now: Instant) -> Result<(), String> {
        self.queue.submit(command, now).map_err(|error| format!("{what}: {error}"))
    }

    /// The next completion, an error for a failed command.
    fn completion(&mut self, what: &str) -> Result<Option<HostCompletion>, String> {
        let Some(completion) = self.queue.poll_completion() else { return Ok(None) };
        if let Some(error) = &completion.transport_error {
            return Err(format!("{what}: {error}"));
        }
        if !completion.cqe.status.is_success() {
            return Err(format!("{what} failed: {}", StatusDisplay(completion.cqe.status)));
        }
        Ok(Some(completion))
    }

    fn is_ready(&self) -> bool {
        matches!(self.queue.state(), QueueState::Ready { .. })
    }
}

/// Where a controller is in coming up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Step {
    /// ICReq and Connect on the admin queue.
    AdminConnect,
    /// Property Get CAP.
    Capabilities,
    /// Property Set CC.EN.
    Enable,
    /// Property Get CSTS until RDY: `poll_at` is when to ask again (`None`: asked).
    AwaitReady {
        poll_at: Option<Instant>,
    },
    IdentifyController,
    NumberOfQueues,
    IdentifyNamespace,
    /// ICReq and Connect on the I/O queue.
    IoConnect,
    /// The one read.
    Read,
    /// Up: only keep-alives from now on.
    Idle,
}

/// One controller: its admin and (once connected) I/O connection.
pub(super) struct HeldController {
    /// Which one (0-based): its host identity follows from it.
    index: usize,
    admin: Link,
    io: Option<Link>,
    pub(super) step: Step,
    /// Coming up must be over by then.
    setup_deadline: Instant,
    controller_id: ControllerId,
    capabilities: ControllerCapabilities,
    /// Blocks and block size of the read.
    read_blocks: u32,
    block_size: u32,
    /// A Keep Alive is outstanding.
    pub(super) keep_alive_outstanding: bool,
}

/// What the controllers share while coming up.
pub(super) struct Setup<'a> {
    pub(super) options: &'a HoldOptions,
}

impl Setup<'_> {
    /// Queue `queue_id` of controller `index`.
    fn queue_config(
        &self,
        index: usize,
        queue_id: QueueId,
        queue_size: u16,
        controller_id: ControllerId,
    ) -> QueueConfig {
        let (host_nqn, host_identifier) = host_identity(index);
        // KATO goes in the admin Connect only.
        let keep_alive_timeout_ms = if queue_id.is_admin() { self.options.keep_alive_timeout_ms } else { 0 };
        QueueConfig {
            queue_id,
            queue_size,
            controller_id,
            subsystem_nqn: self.options.subsystem_nqn.clone(),
            host_nqn,
            host_identifier,
            keep_alive_timeout_ms,
            digests: DigestSettings { header: false, data: false },
            command_timeout_ms: self.options.setup_timeout.as_millis().min(u128::from(u64::MAX)) as u64,
            max_r2t_outstanding: 0,
            dhchap: None,
        }
    }
}

/// Host NQN and host ID of controller `index`: a UUID of its own per controller
/// (the same UUID in both, as nvme-cli derives them).
fn host_identity(index: usize) -> (String, [u8; 16]) {
    let mut identifier = *b"\x5d\x89\x98\x20\xa9\xa5\x4d\xef\xbb\x57\0\0\0\0\0\0";
    identifier[10..].copy_from_slice(&(index as u64).to_be_bytes()[2..]);
    (format!("nqn.2014-08.org.nvmexpress:uuid:{}", nvme_host_client::format_uuid(&identifier)), identifier)
}

impl HeldController {
    pub(super) fn connect(setup: &Setup<'_>, index: usize, now: Instant) -> io::Result<HeldController> {
        let options = setup.options;
        let config = setup.queue_config(index, QueueId::ADMIN, ADMIN_QUEUE_ENTRIES, ControllerId::DYNAMIC);
        Ok(HeldController {
            index,
            admin: Link::connect(options.address, config, options.setup_timeout)?,
            io: None,
            step: Step::AdminConnect,
            setup_deadline: now + options.setup_timeout,
            controller_id: ControllerId::DYNAMIC,
            capabilities: ControllerCapabilities(0),
            read_blocks: 1,
            block_size: READ_BYTES,
            keep_alive_outstanding: false,
        })
    }

    /// Moves the bring-up on as far as the answers so far allow; `true` when
    /// anything moved.
    pub(super) fn advance(&mut self, setup: &Setup<'_>, buffer: &mut [u8], now: Instant) -> Result<bool, String> {
        let mut moved = self.admin.service("admin", buffer, now)?;
        if let Some(io) = &mut self.io {
            moved |= io.service("I/O", buffer, now)?;
        }
        loop {
            let before = self.step;
            self.step_once(setup, now)?;
            if self.step == before {
                break;
            }
            moved = true;
        }
        self.admin.flush().map_err(|error| format!("admin connection: {error}"))?;
        if let Some(io) = &mut self.io {
            io.flush().map_err(|error| format!("I/O connection: {error}"))?;
        }
        if self.step != Step::Idle && now >= self.setup_deadline {
            return Err(format!(
                "not up within {} s (waiting at {:?})",
                setup.options.setup_timeout.as_secs(),
                self.step
            ));
        }
        Ok(moved)
    }

    /// One step, when its answer is there.
    fn step_once(&mut self, setup: &Setup<'_>, now: Instant) -> Result<(), String> {
        let admin = &mut self.admin;
        match self.step {
            Step::AdminConnect => {
                if admin.is_ready() {
                    self.controller_id = admin.queue.controller_id().unwrap_or(ControllerId::DYNAMIC);
                    admin.submit(commands::property_get(property_offset::CAP, 8), "Property Get CAP", now)?;
                    self.step = Step::Capabilities;
                }
            }
            Step::Capabilities => {
                if let Some(completion) = admin.completion("Property Get CAP")? {
                    self.capabilities = ControllerCapabilities(completion.cqe.result_u64());
                    let configuration = ControllerConfiguration(0)
                        .with_command_set_selected(ControllerConfiguration::COMMAND_SET_NVM)
                        .with_io_submission_queue_entry_size(6)
                        .with_io_completion_queue_entry_size(4)
                        .with_enable(true);
                    let command = commands::property_set(property_offset::CC, u64::from(configuration.raw()));
                    admin.submit(command, "Property Set CC.EN", now)?;
                    self.step = Step::Enable;
                }
            }
            Step::Enable => {
                if admin.completion("Property Set CC.EN")?.is_some() {
                    self.step = Step::AwaitReady { poll_at: Some(now) };
                }
            }
            Step::AwaitReady { poll_at: Some(at) } => {
                if now >= at {
                    admin.submit(commands::property_get(property_offset::CSTS, 4), "Property Get CSTS", now)?;
                    self.step = Step::AwaitReady { poll_at: None };
                }
            }
            Step::AwaitReady { poll_at: None } => {
                if let Some(completion) = admin.completion("Property Get CSTS")? {
                    let status = ControllerStatus(completion.cqe.result_dw0);
                    if status.controller_fatal_status() {
                        return Err("CSTS.CFS set after CC.EN".into());
                    }
                    self.step = if status.ready() {
                        let command = commands::identify(cns::CONTROLLER, NamespaceId::NONE, csi::NVM);
                        admin.submit(command, "Identify Controller", now)?;
                        Step::IdentifyController
                    } else {
                        Step::AwaitReady { poll_at: Some(now + READY_POLL_INTERVAL) }
                    };
                }
            }
            Step::IdentifyController => {
                if let Some(completion) = admin.completion("Identify Controller")? {
                    let identify = IdentifyController::decode(identify_data(&completion)?);
                    if identify.controller_id != self.controller_id {
                        return Err(format!(
                            "Identify Controller CNTLID {} differs from Connect's {}",
                            identify.controller_id.0, self.controller_id.0
                        ));
                    }
                    let request = number_of_queues_request(1, 1);
                    let command =
                        commands::set_features(feature_id::NUMBER_OF_QUEUES, NamespaceId::NONE, request, false);
                    admin.submit(command, "Set Features Number of Queues", now)?;
                    self.step = Step::NumberOfQueues;
                }
            }
            Step::NumberOfQueues => self.number_of_queues(setup, now)?,
            Step::IdentifyNamespace => self.identify_namespace(setup, now)?,
            Step::IoConnect => {
                if let Some(io) = self.io.as_mut().filter(|io| io.is_ready()) {
                    let read = commands::read(setup.options.namespace, 0, self.read_blocks, self.block_size);
                    io.submit(read, "Read", now)?;
                    self.step = Step::Read;
                }
            }
            Step::Read => {
                let Some(io) = self.io.as_mut() else { return Err("no I/O connection".into()) };
                if let Some(completion) = io.completion("Read")? {
                    check_read(
                        &completion,
                        self.read_blocks * self.block_size,
                        setup.options.expected_data.as_deref(),
                    )?;
                    self.step = Step::Idle;
                }
            }
            Step::Idle => {}
        }
        Ok(())
    }

    fn number_of_queues(&mut self, setup: &Setup<'_>, now: Instant) -> Result<(), String> {
        // The counts granted are 0's based: at least the one I/O queue asked for.
        if self.admin.completion("Set Features Number of Queues")?.is_some() {
            let command = commands::identify(cns::NAMESPACE, setup.options.namespace, csi::NVM);
            self.admin.submit(command, "Identify Namespace", now)?;
            self.step = Step::IdentifyNamespace;
        }
        Ok(())
    }

    fn identify_namespace(&mut self, setup: &Setup<'_>, now: Instant) -> Result<(), String> {
        let Some(completion) = self.admin.completion("Identify Namespace")? else { return Ok(()) };
        let options = setup.options;
        let identify = IdentifyNamespace::decode(identify_data(&completion)?);
        let block_size = identify
            .formatted_lba_format()
            .and_then(|format| format.block_size_bytes())
            .and_then(|bytes| u32::try_from(bytes).ok())
            .filter(|_| identify.namespace_size > 0)
            .ok_or_else(|| format!("namespace {} is not active on the controller", options.namespace.0))?;
        self.block_size = block_size;
        self.read_blocks = (READ_BYTES / block_size).max(1);
        // As Linux: one Asynchronous Event Request held from now on.
        let mut request = commands::async_event_request();
        request.user_tag = ASYNC_EVENT_TAG;
        self.admin.submit(request, "Asynchronous Event Request", now)?;
        let entries = u32::from(IO_QUEUE_ENTRIES).min(self.capabilities.maximum_queue_entries()).max(2) as u16;
        let config = setup.queue_config(self.index, QueueId(1), entries, self.controller_id);
        let io = Link::connect(options.address, config, options.setup_timeout)
            .map_err(|error| format!("could not connect the I/O queue: {}", connect_error_text(&error)))?;
        self.io = Some(io);
        self.step = Step::IoConnect;
        Ok(())
    }

    /// Sends a Keep Alive unless one is still outstanding (and looks at the I/O
    /// connection: an idle one gets nothing, so this is when a connection the
    /// target closed shows). Returns the Keep Alives answered meanwhile and
    /// whether one was sent.
    pub(super) fn send_keep_alive(&mut self, buffer: &mut [u8], now: Instant) -> Result<(u64, bool), String> {
        let answered = self.idle_service(buffer, now)?;
        if let Some(io) = &mut self.io {
            io.service("I/O", buffer, now)?;
            if let Some(completion) = io.queue.poll_completion() {
                return Err(format!("unexpected completion on the idle I/O queue: {:?}", completion.cqe));
            }
        }
        if self.keep_alive_outstanding {
            return Ok((answered, false));
        }
        let mut command = commands::keep_alive();
        command.user_tag = KEEP_ALIVE_TAG;
        self.admin.submit(command, "Keep Alive", now)?;
        self.admin.flush().map_err(|error| format!("admin connection: {error}"))?;
        self.keep_alive_outstanding = true;
        Ok((answered, true))
    }

    /// Reads the admin queue of an idle controller: Keep Alive answers, and an
    /// asynchronous event (re-armed, as Linux does). Returns the Keep Alives answered.
    pub(super) fn idle_service(&mut self, buffer: &mut [u8], now: Instant) -> Result<u64, String> {
        self.admin.service("admin", buffer, now)?;
        let mut answered = 0;
        while let Some(completion) = self.admin.completion("Keep Alive")? {
            match completion.user_tag {
                KEEP_ALIVE_TAG => {
                    self.keep_alive_outstanding = false;
                    answered += 1;
                }
                ASYNC_EVENT_TAG => {
                    let mut request = commands::async_event_request();
                    request.user_tag = ASYNC_EVENT_TAG;
                    self.admin.submit(request, "Asynchronous Event Request", now)?;
                }
                _ => {}
            }
        }
        self.admin.flush().map_err(|error| format!("admin connection: {error}"))?;
        Ok(answered)
    }
}

/// The 4096 bytes of an Identify.
fn identify_data(completion: &HostCompletion) -> Result<&[u8; IDENTIFY_DATA_BYTES], String> {
    completion.data.as_slice().try_into().map_err(|_| format!("Identify returned {} bytes", completion.data.len()))
}

/// A read's data: all of it, and what was expected.
fn check_read(completion: &HostCompletion, bytes: u32, expected: Option<&[u8]>) -> Result<(), String> {
    if completion.data.len() != bytes as usize {
        return Err(format!("Read returned {} bytes, not {bytes}", completion.data.len()));
    }
    if let Some(expected) = expected {
        let length = expected.len().min(completion.data.len());
        if completion.data[..length] != expected[..length] {
            let offset = (0..length).find(|&i| completion.data[i] != expected[i]).unwrap_or(0);
            return Err(format!("Read returned other data than expected (first difference at byte {offset})"));
        }
    }
    Ok(())
}

/// A connect error, with what to do about the usual ones.
pub(super) fn connect_error_text(error: &io::Error) -> String {
    match error.raw_os_error() {
        Some(EMFILE | ENFILE) => format!("{error}; raise ulimit -n"),
        _ if error.kind() == io::ErrorKind::ConnectionRefused => format!("{error}; is the target listening there?"),
        _ => error.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_controller_is_a_host_of_its_own() {
        let (nqn, id) = host_identity(0x1234);
        assert_eq!(nqn, "nqn.2014-08.org.nvmexpress:uuid:5d899820-a9a5-4def-bb57-000000001234");
        assert_eq!(&id[10..], &[0, 0, 0, 0, 0x12, 0x34]);
        assert_ne!(host_identity(1), host_identity(2));
    }
}
