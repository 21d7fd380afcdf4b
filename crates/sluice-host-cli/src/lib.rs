//! The host subcommands: nvme-cli's vocabulary (`discover`, `connect`, `list`,
//! `id-ctrl`, `id-ns`, `smart-log`, `get-log`, `get-feature`, `set-feature`, `read`,
//! `write`, ...) over the network with `nvme-host-client`, no kernel device involved.
//!
//! - `args`: target selection (`-a/-s/-n/...` or `tcp://ADDR:PORT/NQN`), output format,
//!   number parsers.
//! - `commands`: one function per subcommand: connect, issue, print, disconnect.
//! - `namespaces`: Namespace Management and Attachment (`create-ns`, `delete-ns`,
//!   `attach-ns`, `detach-ns`, `list-ctrl`).
//! - `output`: nvme-cli-style text and JSON renderings, status names, hex dump.
//! - `paths`: several paths to one subsystem (`-a A,B` or `tcp://A:P,B:P/NQN`): the
//!   I/O subcommands through the library's multipath, and `list-subsys`.
//! - `tls_keys`: `gen-tls-key` and `check-tls-key`, the TLS pre-shared keys a host
//!   offers.

pub(crate) mod ana;
pub(crate) mod args;
mod commands;
mod namespaces;
mod output;
mod paths;
mod reservations;
mod session;
pub mod tls_keys;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};

pub use args::{OutputArgs, TargetArgs};

/// Exit status for a failure of the target or the network at run time.
pub const EXIT_RUNTIME: u8 = 1;
/// Exit status for a usage or configuration problem the user can fix.
pub const EXIT_USAGE: u8 = 2;

/// Shown after every host subcommand's help.
pub(crate) const HOST_AFTER_HELP: &str = "\
The target can be given as one string instead of -a/-s/-n:
  tcp://ADDR[:PORT][/NQN]     e.g. tcp://127.0.0.1:4420/nqn.2026-11.io.sluice:default
                              (IPv6: tcp://[::1]:4420/NQN)
Numbers may be decimal or hex with 0x, as in nvme-cli.

Exit status:
  0  success
  1  the target answered with an NVMe error status, or the connection failed
  2  usage or configuration error (bad option or value, missing -a or -n,
     unreadable input file)";

/// Help of `read`/`write`: which letters mean what, since nvme-cli's read/write
/// letters clash with `nvme connect`'s.
const IO_AFTER_HELP: &str = "\
Flags: the target options are the same as in every other subcommand (-a ADDR
-s PORT -n NQN), so the start block, which nvme-cli spells -s, is -b/--start-block
here: a habitual `-s 4420` can never turn into an LBA. -c/-z/-d keep nvme-cli's
meaning (0's based block count, data size, data file), so --reconnect-delay has no
short form here. Without -c the block count follows -z (or, for write, the input's
size; a partial last block is padded with zeros).

The target can be given as one string instead of -a/-s/-n:
  tcp://ADDR[:PORT][/NQN]     e.g. tcp://127.0.0.1:4420/nqn.2026-11.io.sluice:default
Several paths to one subsystem (ANA-aware, failover between them):
  tcp://ADDR:PORT,ADDR:PORT/NQN or -a ADDR,ADDR
Numbers may be decimal or hex with 0x, as in nvme-cli.

Exit status:
  0  success
  1  the target answered with an NVMe error status, or the connection failed
  2  usage or configuration error (bad option or value, missing -a or -n,
     unreadable input file)";

/// The host subcommands, flattened into `sluice`'s subcommand list.
#[derive(Subcommand, Debug)]
pub enum HostCommand {
    /// Read the discovery log of a discovery controller (like `nvme discover`).
    #[command(after_help = HOST_AFTER_HELP)]
    Discover {
        #[command(flatten)]
        target: TargetArgs,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Connectivity check: connect, print the controller summary, disconnect.
    ///
    /// Like `nvme connect`, but there is no kernel device here: the controller is
    /// brought up (Connect, Identify, I/O queues), summarised and disconnected.
    /// Programs that keep connections use the nvme-host-client library.
    #[command(after_help = HOST_AFTER_HELP)]
    Connect {
        #[command(flatten)]
        target: TargetArgs,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// List the subsystem's namespaces (like `nvme list`).
    #[command(after_help = HOST_AFTER_HELP)]
    List {
        #[command(flatten)]
        target: TargetArgs,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// List the active namespace IDs (like `nvme list-ns`).
    #[command(name = "list-ns", after_help = HOST_AFTER_HELP)]
    ListNs {
        #[command(flatten)]
        target: TargetArgs,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Identify Controller (like `nvme id-ctrl`).
    #[command(name = "id-ctrl", after_help = HOST_AFTER_HELP)]
    IdCtrl {
        /// Decode the main bit fields.
        #[arg(short = 'H', long)]
        human_readable: bool,
        #[command(flatten)]
        target: TargetArgs,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Identify Namespace (like `nvme id-ns`).
    #[command(name = "id-ns", after_help = HOST_AFTER_HELP)]
    IdNs {
        /// Namespace ID.
        #[arg(short = 'N', long, default_value = "1", value_parser = args::parse_u32)]
        namespace_id: u32,
        /// Decode the main bit fields.
        #[arg(short = 'H', long)]
        human_readable: bool,
        #[command(flatten)]
        target: TargetArgs,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// SMART / Health Information log (like `nvme smart-log`).
    #[command(name = "smart-log", after_help = HOST_AFTER_HELP)]
    SmartLog {
        /// Namespace ID [default: 0xffffffff, the whole controller].
        #[arg(short = 'N', long, value_parser = args::parse_u32)]
        namespace_id: Option<u32>,
        /// Decode the critical warning bits.
        #[arg(short = 'H', long)]
        human_readable: bool,
        #[command(flatten)]
        target: TargetArgs,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Asymmetric Namespace Access log: each ANA group's state on this path (like
    /// `nvme ana-log`).
    #[command(name = "ana-log", after_help = HOST_AFTER_HELP)]
    AnaLog {
        #[command(flatten)]
        target: TargetArgs,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Every path to a subsystem and its state (like `nvme list-subsys`): give the
    /// paths as -a ADDR,ADDR or tcp://ADDR:PORT,ADDR:PORT/NQN; each is connected in
    /// turn and shown live (with the namespace's ANA state) or unreachable (with why).
    /// Exit 0 when any path is live.
    #[command(name = "list-subsys", after_help = HOST_AFTER_HELP)]
    ListSubsys {
        /// Namespace whose ANA state each path reports.
        #[arg(short = 'N', long, default_value = "1", value_parser = args::parse_u32)]
        namespace_id: u32,
        #[command(flatten)]
        target: TargetArgs,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Any log page as a hex dump or raw binary (like `nvme get-log`).
    ///
    /// Here -i and -l are nvme-cli's log id and length, so --nr-io-queues and
    /// --ctrl-loss-tmo have no short form.
    #[command(
        name = "get-log",
        after_help = HOST_AFTER_HELP,
        mut_arg("nr_io_queues", |arg| arg.short(None)),
        mut_arg("ctrl_loss_tmo", |arg| arg.short(None)),
    )]
    GetLog {
        /// Log page identifier.
        #[arg(short = 'i', long, value_parser = args::parse_u8)]
        log_id: u8,
        /// Bytes to read.
        #[arg(short = 'l', long, value_parser = args::parse_u32)]
        log_len: u32,
        /// Namespace ID.
        #[arg(short = 'N', long, default_value = "0xffffffff", value_parser = args::parse_u32)]
        namespace_id: u32,
        /// Log page offset in bytes.
        #[arg(long, default_value = "0", value_parser = args::parse_u64)]
        lpo: u64,
        /// Write the log to stdout as raw binary.
        #[arg(short = 'b', long)]
        raw_binary: bool,
        #[command(flatten)]
        target: TargetArgs,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Get Features (like `nvme get-feature`).
    ///
    /// Here -s is nvme-cli's --sel, so --trsvcid has no short form.
    #[command(
        name = "get-feature",
        after_help = HOST_AFTER_HELP,
        mut_arg("trsvcid", |arg| arg.short(None)),
    )]
    GetFeature {
        /// Feature identifier (e.g. 7: Number of Queues, 0xf: Keep Alive Timer).
        #[arg(short = 'f', long, value_parser = args::parse_u8)]
        feature_id: u8,
        /// Select: 0 current, 1 default, 2 saved, 3 supported capabilities.
        #[arg(short = 's', long, default_value = "0", value_parser = clap::value_parser!(u8).range(0..=3))]
        sel: u8,
        /// Namespace ID.
        #[arg(short = 'N', long, default_value = "0", value_parser = args::parse_u32)]
        namespace_id: u32,
        /// Command dword 11.
        #[arg(long, default_value = "0", value_parser = args::parse_u32)]
        cdw11: u32,
        /// Decode the value's fields.
        #[arg(short = 'H', long)]
        human_readable: bool,
        #[command(flatten)]
        target: TargetArgs,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Set Features (like `nvme set-feature`).
    #[command(name = "set-feature", after_help = HOST_AFTER_HELP)]
    SetFeature {
        /// Feature identifier.
        #[arg(short = 'f', long, value_parser = args::parse_u8)]
        feature_id: u8,
        /// New value (command dword 11).
        #[arg(short = 'V', long, value_parser = args::parse_u32)]
        value: u32,
        /// Namespace ID.
        #[arg(short = 'N', long, default_value = "0", value_parser = args::parse_u32)]
        namespace_id: u32,
        /// Keep the value across resets (SV).
        #[arg(long)]
        save: bool,
        #[command(flatten)]
        target: TargetArgs,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Read logical blocks to a file or stdout (like `nvme read`).
    #[command(
        after_help = IO_AFTER_HELP,
        mut_arg("reconnect_delay", |arg| arg.short(None)),
    )]
    Read {
        #[command(flatten)]
        io: IoArgs,
        #[command(flatten)]
        target: TargetArgs,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Write logical blocks from a file or stdin (like `nvme write`).
    #[command(
        after_help = IO_AFTER_HELP,
        mut_arg("reconnect_delay", |arg| arg.short(None)),
    )]
    Write {
        #[command(flatten)]
        io: IoArgs,
        /// Force Unit Access: the data is on non-volatile media when the write
        /// completes.
        #[arg(short = 'f', long)]
        force_unit_access: bool,
        #[command(flatten)]
        target: TargetArgs,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Compare logical blocks with data from a file or stdin (like `nvme compare`):
    /// exit 0 when equal, 1 with "Compare Failure" when not.
    #[command(
        after_help = IO_AFTER_HELP,
        mut_arg("reconnect_delay", |arg| arg.short(None)),
    )]
    Compare {
        #[command(flatten)]
        io: IoArgs,
        #[command(flatten)]
        target: TargetArgs,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Copy blocks inside a namespace on the target, no data crossing the network
    /// (like `nvme copy`): the source ranges in order, written from --sdlba.
    #[command(
        after_help = HOST_AFTER_HELP,
        mut_arg("reconnect_delay", |arg| arg.short(None)),
    )]
    Copy {
        /// Namespace ID.
        #[arg(short = 'N', long, default_value = "1", value_parser = args::parse_u32)]
        namespace_id: u32,
        /// Destination's first block (SDLBA).
        #[arg(long, value_parser = args::parse_u64)]
        sdlba: u64,
        /// Source ranges' first blocks, comma separated (nvme-cli's --slbs).
        #[arg(long, value_delimiter = ',', required = true, value_parser = args::parse_u64)]
        slbs: Vec<u64>,
        /// Source ranges' lengths, 0's based as nvme-cli counts them, comma separated,
        /// one per --slbs entry.
        #[arg(long, value_delimiter = ',', required = true, value_parser = args::parse_u32)]
        blocks: Vec<u32>,
        /// Force Unit Access on the destination.
        #[arg(short = 'f', long)]
        force_unit_access: bool,
        #[command(flatten)]
        target: TargetArgs,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Flush the volatile write cache of a namespace (like `nvme flush`).
    #[command(after_help = HOST_AFTER_HELP)]
    Flush {
        /// Namespace ID.
        #[arg(short = 'N', long, default_value = "1", value_parser = args::parse_u32)]
        namespace_id: u32,
        #[command(flatten)]
        target: TargetArgs,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Have the target read and check blocks without transferring them (like `nvme
    /// verify`).
    #[command(
        after_help = HOST_AFTER_HELP,
        mut_arg("reconnect_delay", |arg| arg.short(None)),
    )]
    Verify {
        /// Namespace ID.
        #[arg(short = 'N', long, default_value = "1", value_parser = args::parse_u32)]
        namespace_id: u32,
        /// First block (SLBA).
        #[arg(short = 'b', long = "start-block", visible_alias = "slba", value_parser = args::parse_u64)]
        start_block: u64,
        /// Blocks, 0's based (NLB), as nvme-cli counts them.
        #[arg(short = 'c', long = "block-count", value_parser = args::parse_u32)]
        block_count: u32,
        #[command(flatten)]
        target: TargetArgs,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// create-ns, delete-ns, attach-ns, detach-ns, list-ctrl (namespaces.rs).
    #[command(flatten)]
    Namespace(namespaces::NamespaceCommand),
    /// resv-register, resv-acquire, resv-release, resv-report (reservations.rs).
    #[command(flatten)]
    Reservation(reservations::ReservationCommand),
}

/// The block range and data file of `read` and `write`, with nvme-cli's letters.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "I/O (like `nvme read`/`nvme write`)")]
pub struct IoArgs {
    /// Namespace ID.
    #[arg(short = 'N', long, default_value = "1", value_parser = args::parse_u32)]
    pub namespace_id: u32,
    /// First logical block (SLBA); nvme-cli's -s, which here is the target port.
    #[arg(short = 'b', long, default_value = "0", value_parser = args::parse_u64)]
    pub start_block: u64,
    /// Number of blocks, 0's based as in nvme-cli (0 = one block).
    #[arg(short = 'c', long, value_parser = args::parse_u32)]
    pub block_count: Option<u32>,
    /// Bytes to transfer: 4096, 0x1000, 4k or 4KiB (k/M/G/T and KiB/MiB/GiB/TiB are
    /// powers of 1024, KB/MB/GB/TB powers of 1000); blocks are padded with zeros on
    /// write, the output is cut to this size on read.
    #[arg(short = 'z', long, value_parser = args::parse_data_size)]
    pub data_size: Option<args::DataSize>,
    /// Data file: where read data goes [default: stdout], where write data comes
    /// from [default: stdin].
    #[arg(short = 'd', long, value_name = "FILE")]
    pub data: Option<PathBuf>,
}

impl IoArgs {
    /// `-z` in bytes.
    pub fn data_size_bytes(&self) -> Option<u64> {
        self.data_size.as_ref().map(|size| size.bytes)
    }
}

/// A failure of a host subcommand: one line for stderr and the exit status.
#[derive(Debug)]
pub struct HostError {
    pub message: String,
    pub code: u8,
}

impl HostError {
    /// A problem with the command line or the user's files (exit 2).
    pub fn usage(message: impl Into<String>) -> Self {
        Self { message: message.into(), code: EXIT_USAGE }
    }

    /// A failure of the target or the network (exit 1).
    pub fn runtime(message: impl Into<String>) -> Self {
        Self { message: message.into(), code: EXIT_RUNTIME }
    }
}

/// Runs a host subcommand; errors are printed as one `sluice: ...` line.
pub fn run(command: HostCommand) -> ExitCode {
    match commands::run(command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("sluice: {}", error.message);
            ExitCode::from(error.code)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_subcommands_are_consistent() {
        let command = HostCommand::augment_subcommands(clap::Command::new("sluice"));
        command.debug_assert();
    }
}
