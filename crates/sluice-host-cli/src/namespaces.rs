//! Namespace Management and Namespace Attachment from the host side, in nvme-cli's
//! vocabulary: `create-ns`, `delete-ns`, `attach-ns`, `detach-ns` and `list-ctrl`.
//!
//! Each subcommand connects like every other host subcommand, sends one command (or
//! pages through one list), prints nvme-cli's success line (or JSON) and disconnects.
//! A refusal names the NVMe status and says what it means on a Sluice target, where
//! namespaces are carved out of the subsystem's storage pool and attachment is kept
//! per host NQN (docs/namespace-management.md).

use clap::Subcommand;
use nvme_host_client::commands::{self, NamespaceCreate};
use nvme_host_client::{ClientError, HostCommand, HostCompletion};
use nvme_spec::identify::{decode_controller_list, CONTROLLER_LIST_CAPACITY, IDENTIFY_DATA_BYTES};
use nvme_spec::{ControllerId, IdentifyNamespace, NamespaceId, Status};
use serde_json::{json, Value};

use super::args::{self, OutputArgs, TargetArgs};
use super::output::StatusContext;
use super::session::{command_error, print_json, print_text, Session};
use super::HostError;

/// Shown after the help of every namespace subcommand.
const NAMESPACE_AFTER_HELP: &str = "\
Flags: the target options are the same as in every other subcommand (-a ADDR
-s PORT -n NQN), so the namespace, which nvme-cli spells -n, is -N/--namespace-id
here, and --nsze has no short form (nvme-cli's -s is the target port here). -c
keeps nvme-cli's meaning (--ncap in create-ns, --controllers in attach-ns and
detach-ns, --cntid in list-ctrl), so --reconnect-delay has no short form here.

On a Sluice target, namespaces are created in the subsystem's storage pool and
attachment is recorded per host: attaching to a controller attaches the namespace to
that controller's host NQN, for all of that host's controllers, now and after
reconnects and restarts. Connected hosts are told through an asynchronous event
(Namespace Attribute Changed) and see the change without reconnecting.

The target can be given as one string instead of -a/-s/-n:
  tcp://ADDR[:PORT][/NQN]     e.g. tcp://127.0.0.1:4420/nqn.2026-11.io.sluice:default
Numbers may be decimal or hex with 0x, as in nvme-cli.

Exit status:
  0  success
  1  the target answered with an NVMe error status, or the connection failed
  2  usage or configuration error (bad option or value, missing -a or -n)";

/// The namespace subcommands, flattened into the host subcommands.
#[derive(Subcommand, Debug)]
pub enum NamespaceCommand {
    /// Create a namespace (like `nvme create-ns`); it is attached to no controller
    /// until `attach-ns`.
    ///
    /// NCAP below NSZE asks for a thinly provisioned namespace: the target takes
    /// space from the pool on first write instead of at create.
    #[command(
        name = "create-ns",
        after_help = NAMESPACE_AFTER_HELP,
        mut_arg("reconnect_delay", |arg| arg.short(None)),
    )]
    CreateNs {
        /// Namespace size (NSZE) in logical blocks of the chosen format.
        #[arg(long, value_name = "BLOCKS", value_parser = args::parse_u64)]
        nsze: u64,
        /// Namespace capacity (NCAP) in logical blocks [default: NSZE, fully
        /// provisioned].
        #[arg(short = 'c', long, value_name = "BLOCKS", value_parser = args::parse_u64)]
        ncap: Option<u64>,
        /// LBA format index (FLBAS) [default: 0, or the one --block-size names].
        #[arg(short = 'f', long, value_parser = args::parse_u8, conflicts_with = "block_size")]
        flbas: Option<u8>,
        /// Logical block size in bytes: picks the LBA format with this block size
        /// and no metadata, as nvme-cli does (instead of --flbas).
        #[arg(short = 'b', long, value_name = "BYTES", value_parser = args::parse_u64)]
        block_size: Option<u64>,
        /// End-to-end data protection settings (DPS).
        #[arg(short = 'd', long, default_value = "0", value_parser = args::parse_u8)]
        dps: u8,
        /// Multi-path I/O and sharing capabilities (NMIC; 1 = may be attached to
        /// several controllers at once).
        #[arg(short = 'm', long, default_value = "0", value_parser = args::parse_u8)]
        nmic: u8,
        #[command(flatten)]
        target: TargetArgs,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Delete a namespace (like `nvme delete-ns`); 0xffffffff deletes every
    /// namespace the target lets a host delete.
    ///
    /// Hosts it was attached to lose it at once (they are told through an
    /// asynchronous event); its space returns to the pool once no I/O holds it.
    #[command(name = "delete-ns", after_help = NAMESPACE_AFTER_HELP)]
    DeleteNs {
        /// Namespace ID to delete.
        #[arg(short = 'N', long, value_parser = args::parse_u32)]
        namespace_id: u32,
        #[command(flatten)]
        target: TargetArgs,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Attach a namespace to controllers (like `nvme attach-ns`).
    ///
    /// Without -c the namespace is attached to this command's own controller, that
    /// is to the host NQN this command connects with (-q).
    #[command(
        name = "attach-ns",
        after_help = NAMESPACE_AFTER_HELP,
        mut_arg("reconnect_delay", |arg| arg.short(None)),
    )]
    AttachNs {
        #[command(flatten)]
        attachment: AttachmentArgs,
        #[command(flatten)]
        target: TargetArgs,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Detach a namespace from controllers (like `nvme detach-ns`).
    ///
    /// Without -c the namespace is detached from this command's own controller, that
    /// is from the host NQN this command connects with (-q).
    #[command(
        name = "detach-ns",
        after_help = NAMESPACE_AFTER_HELP,
        mut_arg("reconnect_delay", |arg| arg.short(None)),
    )]
    DetachNs {
        #[command(flatten)]
        attachment: AttachmentArgs,
        #[command(flatten)]
        target: TargetArgs,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// List controller IDs (like `nvme list-ctrl`): those of the subsystem, or with
    /// -N those a namespace is attached to.
    ///
    /// The list includes this command's own controller, which goes away when the
    /// command exits; it is named on stderr.
    #[command(
        name = "list-ctrl",
        after_help = NAMESPACE_AFTER_HELP,
        mut_arg("reconnect_delay", |arg| arg.short(None)),
    )]
    ListCtrl {
        /// Only the controllers this namespace is attached to (Identify CNS 12h;
        /// without it, CNS 13h: every controller of the subsystem).
        #[arg(short = 'N', long, value_parser = args::parse_u32)]
        namespace_id: Option<u32>,
        /// List controller IDs from this one up.
        #[arg(short = 'c', long, default_value = "0", value_parser = parse_controller_id)]
        cntid: u16,
        #[command(flatten)]
        target: TargetArgs,
        #[command(flatten)]
        output: OutputArgs,
    },
}

/// The namespace and controllers of `attach-ns` / `detach-ns`.
#[derive(clap::Args, Debug, Clone)]
#[command(next_help_heading = "Attachment (like `nvme attach-ns`)")]
pub struct AttachmentArgs {
    /// Namespace ID.
    #[arg(short = 'N', long, value_parser = args::parse_u32)]
    pub namespace_id: u32,
    /// Comma-separated controller IDs (CNTLIDs; `sluice list-ctrl` lists them)
    /// [default: this command's own controller].
    #[arg(short = 'c', long, value_name = "CNTLID[,CNTLID...]", value_delimiter = ',',
          value_parser = parse_controller_id)]
    pub controllers: Vec<u16>,
}

fn parse_controller_id(text: &str) -> Result<u16, String> {
    args::parse_number(text, u16::MAX.into()).map(|value| value as u16)
}

pub fn run(command: NamespaceCommand) -> Result<(), HostError> {
    match command {
        NamespaceCommand::CreateNs { nsze, ncap, flbas, block_size, dps, nmic, target, output } => {
            let request = CreateRequest { nsze, ncap: ncap.unwrap_or(nsze), flbas, block_size, dps, nmic };
            create_ns(&target, output, &request)
        }
        NamespaceCommand::DeleteNs { namespace_id, target, output } => delete_ns(&target, output, namespace_id),
        NamespaceCommand::AttachNs { attachment, target, output } => {
            change_attachment(&target, output, &attachment, Direction::Attach)
        }
        NamespaceCommand::DetachNs { attachment, target, output } => {
            change_attachment(&target, output, &attachment, Direction::Detach)
        }
        NamespaceCommand::ListCtrl { namespace_id, cntid, target, output } => {
            list_ctrl(&target, output, namespace_id, cntid)
        }
    }
}

// ---------------------------------------------------------------------------------
// Refusals

/// Which command a status answers, for its explanation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Operation {
    Create,
    Delete,
    Attach,
    Detach,
    ListControllers,
}

/// What a refusal means on a Sluice target (and on most others), in one clause.
fn explain(operation: Operation, nsid: u32, status: Status) -> String {
    let namespace = format!("namespace {nsid}");
    match (status.code_type(), status.code()) {
        (0x0, 0x01) => "the subsystem does not support Namespace Management: it has no storage pool \
                        (on a Sluice target: pool = \"NAME\" on its [[subsystem]])"
            .to_string(),
        (0x0, 0x02) => match operation {
            Operation::Create => "NSZE and NCAP must be at least 1, NCAP at most NSZE, and the namespace of the \
                                  NVM command set"
                .to_string(),
            Operation::Delete | Operation::Detach => format!(
                "{namespace} comes from the target's configuration, not from the pool: change the configuration to \
                 remove it"
            ),
            // Controller lists (CNS 12h/13h) come with Namespace Management; a Sluice
            // target answers them only on subsystems with a pool.
            Operation::ListControllers => "the subsystem does not report controller lists (it does not support \
                                           Namespace Management; on a Sluice target: it has no storage pool)"
                .to_string(),
            Operation::Attach => "the target refused a field of the command".to_string(),
        },
        (0x0, 0x06) => "the target could not record the change in its pool table, so nothing changed: see the \
                        target's log"
            .to_string(),
        (0x0, 0x0B) => format!("{namespace} does not exist in this subsystem (it is not allocated)"),
        (0x1, 0x0A) => "the target has no such LBA format: a Sluice target offers format 0 (the pool's block size) \
                        without metadata or protection information; `sluice id-ns -N 0xffffffff` shows it"
            .to_string(),
        (0x1, 0x15) => "the pool has not enough free space".to_string(),
        (0x1, 0x16) => "every namespace ID of the subsystem is in use: delete a namespace first".to_string(),
        (0x1, 0x18) => format!(
            "{namespace} is already attached to the host of one of these controllers (attachment is per host NQN)"
        ),
        (0x1, 0x19) => format!("{namespace} is private to another controller"),
        (0x1, 0x1A) => format!(
            "{namespace} is not attached to the host of one of these controllers; `sluice list-ctrl -N {nsid}` lists \
             the controllers it is attached to"
        ),
        (0x1, 0x1B) => "the target cannot provision thinly: give --ncap equal to --nsze".to_string(),
        (0x1, 0x1C) => "a controller ID is not a controller of this subsystem (or the list is empty); \
                        `sluice list-ctrl` lists them"
            .to_string(),
        _ => String::new(),
    }
}

/// An admin command whose error status is returned as an error.
fn admin(session: &Session, command: HostCommand) -> Result<HostCompletion, ClientError> {
    let opcode = command.sqe.opcode();
    let completion = session.controller().admin_command(command)?;
    if let Some(error) = &completion.transport_error {
        return Err(ClientError::Protocol(error.clone()));
    }
    if !completion.cqe.status.is_success() {
        return Err(ClientError::Command { admin: true, opcode, status: completion.cqe.status });
    }
    Ok(completion)
}

fn identify_data(completion: &HostCompletion) -> Result<&[u8; IDENTIFY_DATA_BYTES], HostError> {
    completion.data.as_slice().try_into().map_err(|_| {
        HostError::runtime(format!("the target returned {} bytes of Identify data, not 4096", completion.data.len()))
    })
}

/// "1.50 GiB" for a byte count.
fn binary_bytes(bytes: u128) -> String {
    let (value, suffix) = units::format::scale(bytes as f64, units::format::Base::Binary);
    if suffix.is_empty() {
        format!("{bytes} bytes")
    } else {
        format!("{value:.2} {suffix}B")
    }
}

// ---------------------------------------------------------------------------------
// create-ns / delete-ns

struct CreateRequest {
    nsze: u64,
    ncap: u64,
    flbas: Option<u8>,
    block_size: Option<u64>,
    dps: u8,
    nmic: u8,
}

fn create_ns(args: &TargetArgs, output: OutputArgs, request: &CreateRequest) -> Result<(), HostError> {
    if request.nsze == 0 {
        return Err(HostError::usage("--nsze must be at least 1 block"));
    }
    if request.ncap == 0 || request.ncap > request.nsze {
        return Err(HostError::usage(format!(
            "--ncap must be between 1 and --nsze ({}) blocks; below --nsze asks for thin provisioning",
            request.nsze
        )));
    }
    if let Some(bytes) = request.block_size {
        if !bytes.is_power_of_two() {
            return Err(HostError::usage(format!("--block-size {bytes} is not a power of two")));
        }
    }
    let session = Session::open(args)?;
    let flbas = match (request.flbas, request.block_size) {
        (Some(flbas), _) => flbas,
        (None, Some(bytes)) => format_for_block_size(&session, bytes)?,
        (None, None) => 0,
    };
    let settings = NamespaceCreate {
        size_blocks: request.nsze,
        capacity_blocks: request.ncap,
        formatted_lba_size: flbas,
        protection_settings: request.dps,
        multipath_capabilities: request.nmic,
    };
    let completion = admin(&session, commands::namespace_create(&settings)).map_err(|error| {
        let shortfall = capacity_shortfall(&session, &error, request.ncap, flbas);
        command_error("create-ns", error, StatusContext::Admin, |status| {
            let reason = explain(Operation::Create, 0, status);
            match shortfall {
                Some(detail) if !reason.is_empty() => format!("{reason} ({detail})"),
                _ => reason,
            }
        })
    })?;
    let nsid = completion.cqe.result_dw0;
    if output.json() {
        print_json(&json!({
            "command": "create-ns",
            "nsid": nsid,
            "nsze": request.nsze,
            "ncap": request.ncap,
            "flbas": flbas,
            "result": "success",
        }))
    } else {
        print_text(&format!("create-ns: Success, created nsid:{nsid}\n"))
    }
}

/// The LBA format with `bytes`-byte blocks and no metadata, from the formats common
/// to the subsystem's namespaces (Identify Namespace, NSID FFFFFFFFh), as nvme-cli
/// looks it up.
fn format_for_block_size(session: &Session, bytes: u64) -> Result<u8, HostError> {
    let common = session.controller().identify_namespace(NamespaceId::BROADCAST).map_err(|error| {
        command_error("create-ns: reading the target's LBA formats", error, StatusContext::Admin, |_| {
            "give the format index with --flbas instead of --block-size".to_string()
        })
    })?;
    let count = usize::from(common.number_of_lba_formats) + 1;
    let formats: Vec<_> = common.lba_formats.iter().take(count).enumerate().collect();
    if let Some((index, _)) =
        formats.iter().find(|(_, format)| format.block_size_bytes() == Some(bytes) && format.metadata_size == 0)
    {
        return Ok(*index as u8);
    }
    let offered: Vec<String> = formats
        .iter()
        .filter_map(|(index, format)| {
            format.block_size_bytes().map(|size| format!("{index}: {size} bytes, {} metadata", format.metadata_size))
        })
        .collect();
    Err(HostError::usage(format!(
        "the target has no LBA format with {bytes}-byte blocks and no metadata (it offers {}): correct --block-size or give --flbas",
        if offered.is_empty() { "none".to_string() } else { offered.join("; ") }
    )))
}

/// For a create refused for capacity: what the pool has left and what was asked for,
/// from a fresh Identify Controller (UNVMCAP) and the chosen format's block size.
fn capacity_shortfall(session: &Session, error: &ClientError, ncap: u64, flbas: u8) -> Option<String> {
    let status = error.status()?;
    if (status.code_type(), status.code()) != (0x1, 0x15) {
        return None;
    }
    let free = session.controller().identify_controller().ok()?.unallocated_nvm_capacity;
    let block_bytes = session
        .controller()
        .identify_namespace(NamespaceId::BROADCAST)
        .ok()
        .and_then(|common: IdentifyNamespace| common.lba_formats.get(usize::from(flbas & 0x0F)).copied())
        .and_then(|format| format.block_size_bytes());
    Some(match block_bytes {
        Some(block_bytes) => format!(
            "{} unallocated, the namespace needs {}",
            binary_bytes(free),
            binary_bytes(u128::from(ncap) * u128::from(block_bytes))
        ),
        None => format!("{} unallocated", binary_bytes(free)),
    })
}

fn delete_ns(args: &TargetArgs, output: OutputArgs, nsid: u32) -> Result<(), HostError> {
    if nsid == 0 {
        return Err(HostError::usage("-N/--namespace-id must name a namespace (0 is none; 0xffffffff is all)"));
    }
    let session = Session::open(args)?;
    admin(&session, commands::namespace_delete(NamespaceId(nsid))).map_err(|error| {
        command_error("delete-ns", error, StatusContext::Admin, |status| explain(Operation::Delete, nsid, status))
    })?;
    if output.json() {
        print_json(&json!({ "command": "delete-ns", "nsid": nsid, "result": "success" }))
    } else {
        print_text(&format!("delete-ns: Success, deleted nsid:{nsid}\n"))
    }
}

// ---------------------------------------------------------------------------------
// attach-ns / detach-ns

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Direction {
    Attach,
    Detach,
}

impl Direction {
    fn name(self) -> &'static str {
        match self {
            Direction::Attach => "attach-ns",
            Direction::Detach => "detach-ns",
        }
    }
}

fn change_attachment(
    args: &TargetArgs,
    output: OutputArgs,
    attachment: &AttachmentArgs,
    direction: Direction,
) -> Result<(), HostError> {
    let name = direction.name();
    let nsid = attachment.namespace_id;
    if nsid == 0 || nsid == NamespaceId::BROADCAST.0 {
        return Err(HostError::usage(format!("{name}: -N/--namespace-id must name one namespace")));
    }
    if attachment.controllers.len() > CONTROLLER_LIST_CAPACITY {
        return Err(HostError::usage(format!(
            "{name}: at most {CONTROLLER_LIST_CAPACITY} controllers fit in one controller list"
        )));
    }
    let session = Session::open(args)?;
    let own = session.controller().controller_id();
    let controllers: Vec<ControllerId> = if attachment.controllers.is_empty() {
        // nvme-cli would send an empty list, which changes nothing; attaching to
        // "this host" is what a caller without -c can mean here.
        eprintln!(
            "{name}: no -c given: using this command's own controller {:#x}, that is host NQN {}",
            own.0, session.target.host_nqn
        );
        vec![own]
    } else {
        attachment.controllers.iter().copied().map(ControllerId).collect()
    };
    let command = match direction {
        Direction::Attach => commands::namespace_attach(NamespaceId(nsid), &controllers),
        Direction::Detach => commands::namespace_detach(NamespaceId(nsid), &controllers),
    };
    let operation = if direction == Direction::Attach { Operation::Attach } else { Operation::Detach };
    admin(&session, command)
        .map_err(|error| command_error(name, error, StatusContext::Admin, |status| explain(operation, nsid, status)))?;
    if output.json() {
        let list: Vec<u16> = controllers.iter().map(|id| id.0).collect();
        print_json(&json!({ "command": name, "nsid": nsid, "controllers": list, "result": "success" }))
    } else {
        print_text(&format!("{name}: Success, nsid:{nsid}\n"))
    }
}

// ---------------------------------------------------------------------------------
// list-ctrl

fn list_ctrl(args: &TargetArgs, output: OutputArgs, nsid: Option<u32>, first: u16) -> Result<(), HostError> {
    let session = Session::open(args)?;
    let what = match nsid {
        Some(nsid) => format!("list-ctrl (controllers of namespace {nsid})"),
        None => "list-ctrl".to_string(),
    };
    let mut controllers: Vec<u16> = Vec::new();
    let mut from = first;
    loop {
        let command = commands::identify_controller_list(nsid.map(NamespaceId), ControllerId(from));
        let completion = admin(&session, command).map_err(|error| {
            command_error(&what, error, StatusContext::Admin, |status| {
                explain(Operation::ListControllers, nsid.unwrap_or(0), status)
            })
        })?;
        let page: Vec<u16> = decode_controller_list(identify_data(&completion)?).map(|id| id.0).collect();
        let full = page.len() == CONTROLLER_LIST_CAPACITY;
        // A list holds IDs from `from` up, ascending: anything else would loop.
        let next = page.last().copied().filter(|&last| last >= from && last < u16::MAX);
        controllers.extend(page);
        match next {
            Some(last) if full => from = last + 1,
            _ => break,
        }
    }
    let own = session.controller().controller_id().0;
    if output.json() {
        let list: Vec<Value> = controllers.iter().map(|id| json!({ "ctrl_id": id })).collect();
        print_json(&json!({ "num_ctrl": controllers.len(), "ctrl_list": list, "this_ctrl_id": own }))?;
    } else {
        let mut text = format!("num of ctrls present: {}\n", controllers.len());
        for (index, id) in controllers.iter().enumerate() {
            text.push_str(&format!("[{index:>4}]:{id:#x}\n"));
        }
        print_text(&text)?;
    }
    if controllers.contains(&own) {
        eprintln!("list-ctrl: {own:#x} is this command's own controller (gone when it exits)");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvme_spec::status::StatusCodeType;

    fn specific(code: u8) -> Status {
        Status::new(StatusCodeType::CommandSpecific, code).with_do_not_retry()
    }

    #[test]
    fn refusals_are_explained() {
        assert_eq!(explain(Operation::Create, 0, specific(0x15)), "the pool has not enough free space");
        assert!(explain(Operation::Attach, 4, specific(0x1C)).contains("sluice list-ctrl"));
        assert!(explain(Operation::Detach, 4, specific(0x1A)).contains("list-ctrl -N 4"));
        assert!(explain(Operation::Delete, 1, Status::INVALID_FIELD).contains("configuration"));
        assert!(explain(Operation::Create, 0, Status::INVALID_FIELD).contains("NCAP"));
        assert!(explain(Operation::Create, 0, Status::INVALID_OPCODE).contains("no storage pool"));
        assert!(explain(Operation::Delete, 9, Status::INVALID_NAMESPACE_OR_FORMAT).contains("namespace 9"));
        assert_eq!(explain(Operation::Create, 0, Status::SUCCESS), "");
    }

    #[test]
    fn byte_counts() {
        assert_eq!(binary_bytes(512), "512 bytes");
        assert_eq!(binary_bytes(3 << 29), "1.50 GiB");
        assert_eq!(binary_bytes(256 << 20), "256.00 MiB");
    }

    #[test]
    fn controller_ids() {
        assert_eq!(parse_controller_id("0x41"), Ok(0x41));
        assert_eq!(parse_controller_id("7"), Ok(7));
        assert!(parse_controller_id("65536").is_err());
    }
}
