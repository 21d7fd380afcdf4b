//! Several paths to one subsystem on the command line: the I/O subcommands (`read`,
//! `write`, `compare`, `flush`, `verify`) through the host library's multipath
//! (ANA-aware path choice, failover) when more than one address is given, and
//! `list-subsys`, which shows each path's state like `nvme list-subsys`.

use std::time::Duration;

use nvme_host_client::{ClientError, CommandQueue, Controller, HostCommand, HostCompletion, Multipath, MultipathQueue};
use nvme_spec::{IdentifyNamespace, NamespaceId};
use serde_json::{json, Value};

use super::args::{OutputArgs, Purpose, Target, TargetArgs};
use super::output::StatusContext;
use super::session::{command_error, connect_error, print_json, print_text, Session};
use super::HostError;

/// Where the I/O subcommands send their commands: one controller, or a namespace
/// through several paths.
pub(super) enum IoSession {
    Single(Box<Session>),
    Paths(Box<PathSession>),
}

/// A namespace through several paths, for one command at a time.
pub(super) struct PathSession {
    /// Dropped before `multipath`: the queue holds each path's I/O queue.
    queue: Option<MultipathQueue>,
    multipath: Option<Multipath>,
    nsid: NamespaceId,
    block_size: u32,
    max_transfer_bytes: u32,
    /// How long one command may take before the CLI stops waiting: the longest
    /// command timeout of any path plus a margin (the queue fails the command first).
    patience: Duration,
}

impl IoSession {
    /// Connects to namespace `nsid` through every address given; one address is
    /// a plain session.
    pub(super) fn open(args: &TargetArgs, nsid: u32) -> Result<IoSession, HostError> {
        let mut targets = args.resolve_paths(Purpose::Subsystem)?;
        if targets.len() == 1 {
            return Session::connect(targets.remove(0)).map(|session| IoSession::Single(Box::new(session)));
        }
        PathSession::open(targets, nsid, args).map(|paths| IoSession::Paths(Box::new(paths)))
    }

    pub(super) fn identify_namespace(&self, nsid: u32) -> Result<IdentifyNamespace, HostError> {
        match self {
            IoSession::Single(session) => session.identify_namespace(nsid),
            IoSession::Paths(paths) => paths
                .multipath()
                .identify_namespace()
                .map_err(|error| command_error("identify namespace", error, StatusContext::Admin, |_| String::new())),
        }
    }

    pub(super) fn read(&mut self, nsid: u32, lba: u64, blocks: u32) -> Result<Vec<u8>, ClientError> {
        match self {
            IoSession::Single(session) => session.controller().read(NamespaceId(nsid), lba, blocks),
            IoSession::Paths(paths) => paths.read(lba, blocks),
        }
    }

    pub(super) fn write(&mut self, nsid: u32, lba: u64, data: &[u8], fua: bool) -> Result<(), ClientError> {
        match self {
            IoSession::Single(session) => session.controller().write(NamespaceId(nsid), lba, data, fua),
            IoSession::Paths(paths) => paths.write(lba, data, fua),
        }
    }

    /// Largest transfer of one command (MDTS; on several paths the smallest).
    pub(super) fn max_transfer_bytes(&self) -> u32 {
        match self {
            IoSession::Single(session) => session.controller().max_transfer_bytes(),
            IoSession::Paths(paths) => paths.max_transfer_bytes,
        }
    }

    /// One command: `data` must fit [`IoSession::max_transfer_bytes`]. `Ok(false)` on
    /// Compare Failure.
    pub(super) fn compare(&mut self, nsid: u32, lba: u64, data: &[u8]) -> Result<bool, ClientError> {
        match self {
            IoSession::Single(session) => session.controller().compare(NamespaceId(nsid), lba, data),
            IoSession::Paths(paths) => {
                let command = nvme_host::commands::compare(paths.nsid, lba, data.to_vec(), paths.block_size);
                match paths.execute(command) {
                    Ok(_) => Ok(true),
                    Err(ClientError::Command { status, .. })
                        if (status.code_type(), status.code())
                            == (
                                nvme_spec::Status::COMPARE_FAILURE.code_type(),
                                nvme_spec::Status::COMPARE_FAILURE.code(),
                            ) =>
                    {
                        Ok(false)
                    }
                    Err(error) => Err(error),
                }
            }
        }
    }

    pub(super) fn flush(&mut self, nsid: u32) -> Result<(), ClientError> {
        match self {
            IoSession::Single(session) => session.controller().flush(NamespaceId(nsid)),
            IoSession::Paths(paths) => paths.execute(nvme_host::commands::flush(paths.nsid)).map(drop),
        }
    }

    /// One command built by the caller (Verify).
    pub(super) fn io_command(&mut self, command: HostCommand) -> Result<HostCompletion, ClientError> {
        match self {
            IoSession::Single(session) => session.controller().io_command(command),
            IoSession::Paths(paths) => paths.execute(command),
        }
    }
}

impl PathSession {
    fn open(mut targets: Vec<Target>, nsid: u32, args: &TargetArgs) -> Result<PathSession, HostError> {
        let count = targets.len();
        let options: Vec<_> = targets.iter_mut().map(Target::take_options).collect();
        let patience =
            options.iter().map(|options| options.command_timeout).max().unwrap_or_default() + Duration::from_secs(5);
        let multipath = Multipath::connect(options, NamespaceId(nsid), args.iopolicy.path_policy()).map_err(
            |error| match error {
                // Two addresses that are not paths to one namespace: say which.
                ClientError::InvalidController(message) | ClientError::InvalidArgument(message) => {
                    HostError::runtime(message)
                }
                error => connect_error(&targets[0], error),
            },
        )?;
        for (address, reason) in multipath.unreachable() {
            eprintln!(
                "sluice: path {address} is unreachable ({reason}); using {} of {count} paths",
                count - multipath.unreachable().len()
            );
        }
        let block_size = multipath
            .block_size()
            .map_err(|error| command_error("identify namespace", error, StatusContext::Admin, |_| String::new()))?;
        let queue = multipath
            .take_io_queue(0)
            .ok_or_else(|| HostError::runtime("a path has no I/O queue free (the target granted none)"))?;
        let max_transfer_bytes = multipath.max_transfer_bytes().max(block_size);
        Ok(PathSession {
            queue: Some(queue),
            multipath: Some(multipath),
            nsid: NamespaceId(nsid),
            block_size,
            max_transfer_bytes,
            patience,
        })
    }

    fn multipath(&self) -> &Multipath {
        self.multipath.as_ref().expect("the multipath is there until the session is dropped")
    }

    fn execute(&mut self, command: HostCommand) -> Result<HostCompletion, ClientError> {
        let queue = self.queue.as_mut().expect("the queue is there until the session is dropped");
        queue.execute(command, self.patience)
    }

    /// Blocks per command: what every path's MDTS allows.
    fn blocks_per_command(&self) -> u32 {
        (self.max_transfer_bytes / self.block_size).max(1)
    }

    fn read(&mut self, lba: u64, blocks: u32) -> Result<Vec<u8>, ClientError> {
        let mut data = Vec::with_capacity(blocks as usize * self.block_size as usize);
        let per_command = self.blocks_per_command();
        let mut done = 0;
        while done < blocks {
            let count = per_command.min(blocks - done);
            let command = nvme_host::commands::read(self.nsid, lba + u64::from(done), count, self.block_size);
            data.extend_from_slice(&self.execute(command)?.data);
            done += count;
        }
        Ok(data)
    }

    fn write(&mut self, lba: u64, data: &[u8], fua: bool) -> Result<(), ClientError> {
        let block_size = self.block_size as usize;
        if data.is_empty() || !data.len().is_multiple_of(block_size) {
            return Err(ClientError::InvalidArgument(format!(
                "write of {} bytes is not whole {block_size}-byte blocks",
                data.len()
            )));
        }
        let chunk_bytes = self.blocks_per_command() as usize * block_size;
        for (index, chunk) in data.chunks(chunk_bytes).enumerate() {
            let first = lba + (index * chunk_bytes / block_size) as u64;
            self.execute(nvme_host::commands::write(self.nsid, first, chunk.to_vec(), self.block_size, fua))?;
        }
        Ok(())
    }
}

impl Drop for PathSession {
    fn drop(&mut self) {
        drop(self.queue.take());
        if let Some(multipath) = self.multipath.take() {
            if let Err(error) = multipath.disconnect() {
                tracing::debug!(%error, "multipath disconnect failed");
            }
        }
    }
}

// ---------------------------------------------------------------------------------
// list-subsys

/// One path as `list-subsys` found it.
struct PathReport {
    target: Target,
    /// CNTLID and the namespace's ANA state (`None`: no ANA reported), or why the
    /// path is not live.
    state: Result<(u16, Option<&'static str>), String>,
}

/// `list-subsys`: connects to every address given, one at a time, and prints each
/// path's state and the namespace's ANA state on it. Exit 0 when any path is live.
pub(super) fn list_subsys(args: &TargetArgs, output: OutputArgs, nsid: u32) -> Result<(), HostError> {
    let targets = args.resolve_paths(Purpose::Subsystem)?;
    let nqn = targets[0].nqn.clone();
    let host_nqn = targets[0].host_nqn.clone();
    let reports: Vec<PathReport> = targets.into_iter().map(|target| probe(target, nsid)).collect();
    if output.json() {
        print_json(&json_of(&reports, &nqn, &host_nqn, args))?;
    } else {
        print_text(&text_of(&reports, &nqn, &host_nqn, args))?;
    }
    if reports.iter().any(|report| report.state.is_ok()) {
        Ok(())
    } else {
        Err(HostError::runtime(format!("no path to {nqn} is live")))
    }
}

fn probe(mut target: Target, nsid: u32) -> PathReport {
    let options = target.take_options();
    let state = match Controller::connect(options) {
        Ok(controller) => {
            let controller_id = controller.identify().controller_id.0;
            let state = controller
                .ana_state(NamespaceId(nsid))
                .map(|state| state.map(|state| state.name()))
                .map_err(|error| format!("ANA log: {error}"));
            if let Err(error) = controller.disconnect() {
                tracing::debug!(%error, "disconnect failed");
            }
            state.map(|ana| (controller_id, ana))
        }
        Err(error) => Err(connect_error(&target, error).message),
    };
    PathReport { target, state }
}

fn path_address(target: &Target) -> String {
    format!("traddr={},trsvcid={}", target.address.ip(), target.address.port())
}

fn text_of(reports: &[PathReport], nqn: &str, host_nqn: &str, args: &TargetArgs) -> String {
    let mut out = format!("{nqn}\n  hostnqn={host_nqn}\n  iopolicy={}\n\\\n", policy_name(args));
    for report in reports {
        let address = path_address(&report.target);
        match &report.state {
            Ok((controller_id, ana)) => {
                let ana = ana.map(|state| format!(" {state}")).unwrap_or_default();
                out.push_str(&format!(" +- tcp {address} cntlid={controller_id} live{ana}\n"));
            }
            Err(reason) => out.push_str(&format!(" +- tcp {address} unreachable: {reason}\n")),
        }
    }
    out
}

fn json_of(reports: &[PathReport], nqn: &str, host_nqn: &str, args: &TargetArgs) -> Value {
    let paths: Vec<Value> = reports
        .iter()
        .map(|report| {
            let mut path = json!({ "Transport": "tcp", "Address": path_address(&report.target) });
            match &report.state {
                Ok((controller_id, ana)) => {
                    path["State"] = json!("live");
                    path["Cntlid"] = json!(controller_id);
                    if let Some(state) = ana {
                        path["ANAState"] = json!(state);
                    }
                }
                Err(reason) => {
                    path["State"] = json!("unreachable");
                    path["Reason"] = json!(reason);
                }
            }
            path
        })
        .collect();
    json!([{ "HostNQN": host_nqn, "Subsystems": [{ "NQN": nqn, "IOPolicy": policy_name(args), "Paths": paths }] }])
}

fn policy_name(args: &TargetArgs) -> &'static str {
    match args.iopolicy {
        super::args::IoPolicy::RoundRobin => "round-robin",
        super::args::IoPolicy::QueueDepth => "queue-depth",
    }
}
