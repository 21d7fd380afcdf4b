//! `sluice resv-register|resv-acquire|resv-release|resv-report`: persistent
//! reservations in nvme-cli's vocabulary (its option names; -N for the namespace, as
//! `sluice read`/`write`, since -n is the subsystem NQN here, and --rtype, --racqa and
//! --rrela without short forms, since -t and -a name the transport and address).

use clap::Subcommand;
use nvme_host::commands;
use nvme_spec::{NamespaceId, Status};
use serde_json::{json, Value};

use super::args::{self, OutputArgs, TargetArgs};
use super::output::StatusContext;
use super::session::{command_error, print_json, print_text, Session};
use super::{HostError, HOST_AFTER_HELP};

/// The reservation subcommands, flattened into the host subcommands.
#[derive(Subcommand, Debug)]
pub enum ReservationCommand {
    /// Register, unregister or replace this host's reservation key (like `nvme
    /// resv-register`).
    #[command(
        name = "resv-register",
        after_help = HOST_AFTER_HELP,
        mut_arg("reconnect_delay", |arg| arg.short(None)),
        mut_arg("keep_alive_tmo", |arg| arg.short(None)),
        mut_arg("nr_io_queues", |arg| arg.short(None)),
    )]
    Register {
        #[arg(short = 'N', long, default_value = "1", value_parser = args::parse_u32)]
        namespace_id: u32,
        /// Current reservation key (CRKEY).
        #[arg(short = 'c', long, default_value = "0", value_parser = args::parse_u64)]
        crkey: u64,
        /// New reservation key (NRKEY).
        #[arg(short = 'k', long, default_value = "0", value_parser = args::parse_u64)]
        nrkey: u64,
        /// RREGA: 0 register, 1 unregister, 2 replace.
        #[arg(short = 'r', long, default_value = "0", value_parser = args::parse_u8)]
        rrega: u8,
        /// Ignore the existing key (IEKEY).
        #[arg(short = 'i', long)]
        iekey: bool,
        /// CPTPL: 0 no change, 2 clear persist through power loss, 3 set it.
        #[arg(short = 'p', long, default_value = "0", value_parser = args::parse_u8)]
        cptpl: u8,
        #[command(flatten)]
        target: TargetArgs,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Acquire or preempt a reservation (like `nvme resv-acquire`).
    #[command(
        name = "resv-acquire",
        after_help = HOST_AFTER_HELP,
        mut_arg("reconnect_delay", |arg| arg.short(None)),
        mut_arg("nr_io_queues", |arg| arg.short(None)),
    )]
    Acquire {
        #[arg(short = 'N', long, default_value = "1", value_parser = args::parse_u32)]
        namespace_id: u32,
        /// Current reservation key (CRKEY).
        #[arg(short = 'c', long, default_value = "0", value_parser = args::parse_u64)]
        crkey: u64,
        /// Preempt reservation key (PRKEY).
        #[arg(short = 'p', long, default_value = "0", value_parser = args::parse_u64)]
        prkey: u64,
        /// RTYPE: 1 write exclusive, 2 exclusive access, 3/4 the same for registrants
        /// only, 5/6 for all registrants.
        #[arg(long, default_value = "0", value_parser = args::parse_u8)]
        rtype: u8,
        /// RACQA: 0 acquire, 1 preempt, 2 preempt and abort.
        #[arg(long, default_value = "0", value_parser = args::parse_u8)]
        racqa: u8,
        /// Ignore the existing key (IEKEY).
        #[arg(short = 'i', long)]
        iekey: bool,
        #[command(flatten)]
        target: TargetArgs,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Release or clear a reservation (like `nvme resv-release`).
    #[command(
        name = "resv-release",
        after_help = HOST_AFTER_HELP,
        mut_arg("reconnect_delay", |arg| arg.short(None)),
        mut_arg("nr_io_queues", |arg| arg.short(None)),
    )]
    Release {
        #[arg(short = 'N', long, default_value = "1", value_parser = args::parse_u32)]
        namespace_id: u32,
        /// Current reservation key (CRKEY).
        #[arg(short = 'c', long, default_value = "0", value_parser = args::parse_u64)]
        crkey: u64,
        /// RTYPE of the reservation released.
        #[arg(long, default_value = "0", value_parser = args::parse_u8)]
        rtype: u8,
        /// RRELA: 0 release, 1 clear.
        #[arg(long, default_value = "0", value_parser = args::parse_u8)]
        rrela: u8,
        /// Ignore the existing key (IEKEY).
        #[arg(short = 'i', long)]
        iekey: bool,
        #[command(flatten)]
        target: TargetArgs,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// The namespace's registrants and reservation (like `nvme resv-report`; the
    /// extended data structure with 128-bit host identifiers, which fabrics use).
    #[command(name = "resv-report", after_help = HOST_AFTER_HELP)]
    Report {
        #[arg(short = 'N', long, default_value = "1", value_parser = args::parse_u32)]
        namespace_id: u32,
        /// Dwords to read, 0's based [default: room for 63 registrants].
        #[arg(short = 'd', long, default_value = "1023", value_parser = args::parse_u32)]
        numd: u32,
        #[command(flatten)]
        target: TargetArgs,
        #[command(flatten)]
        output: OutputArgs,
    },
}

/// Which reservation command was refused, for [`explain`]: an Invalid Field means a
/// different thing for each.
#[derive(Clone, Copy)]
enum Refused {
    /// Register, with the CPTPL it asked for.
    Register {
        change_persist_through_power_loss: u8,
    },
    Acquire,
    Release,
    Report,
}

/// What a reservation refusal means, in one clause.
fn explain(refused: Refused, status: Status) -> String {
    match (status.code_type(), status.code()) {
        (0x0, 0x83) => "reservation conflict: the key does not match this host's registration, the host is not \
                        registered, or another host holds the reservation"
            .to_string(),
        (0x0, 0x02) => match refused {
            // A target that cannot keep reservations across a restart (RESCAP bit 0
            // clear in id-ns) refuses to turn Persist Through Power Loss on.
            Refused::Register { change_persist_through_power_loss: 3 } => {
                "the target cannot persist reservations through power loss (CPTPL 3): a Sluice target needs \
                 `[target] state_dir` for that (see docs/config.md); `sluice id-ns` shows PTPL support as RESCAP \
                 bit 0. Register with --cptpl 0 (no change) or 2 (off) instead, or check RREGA is 0-2"
                    .to_string()
            }
            Refused::Register { .. } => "a field is invalid: RREGA must be 0-2 and CPTPL 0 (no change), 2 (off) or, \
                                         on a target with PTPL, 3 (on)"
                .to_string(),
            Refused::Acquire => "a field is invalid: RACQA must be 0-2 and RTYPE 1-6".to_string(),
            Refused::Release => {
                "a field is invalid: RRELA must be 0-1 and RTYPE 1-6, the type of the reservation held".to_string()
            }
            Refused::Report => "a field is invalid".to_string(),
        },
        (0x0, 0x18) => "the target wants the extended report (128-bit host identifiers)".to_string(),
        _ => String::new(),
    }
}

fn run_command(
    args: &TargetArgs,
    output: OutputArgs,
    what: &str,
    refused: Refused,
    command: nvme_host::HostCommand,
) -> Result<(), HostError> {
    let session = Session::open(args)?;
    session
        .controller()
        .io_command(command)
        .map_err(|error| command_error(what, error, StatusContext::Io, |status| explain(refused, status)))?;
    if output.json() {
        print_json(&json!({ "command": what, "result": "success" }))
    } else {
        print_text(&format!("NVME Reservation {what} success\n"))
    }
}

pub fn run(command: ReservationCommand) -> Result<(), HostError> {
    match command {
        ReservationCommand::Register { namespace_id, crkey, nrkey, rrega, iekey, cptpl, target, output } => {
            let command = commands::reservation_register(NamespaceId(namespace_id), rrega, iekey, cptpl, crkey, nrkey);
            run_command(
                &target,
                output,
                "register",
                Refused::Register { change_persist_through_power_loss: cptpl },
                command,
            )
        }
        ReservationCommand::Acquire { namespace_id, crkey, prkey, rtype, racqa, iekey, target, output } => {
            let command = commands::reservation_acquire(NamespaceId(namespace_id), racqa, iekey, rtype, crkey, prkey);
            run_command(&target, output, "acquire", Refused::Acquire, command)
        }
        ReservationCommand::Release { namespace_id, crkey, rtype, rrela, iekey, target, output } => {
            let command = commands::reservation_release(NamespaceId(namespace_id), rrela, iekey, rtype, crkey);
            run_command(&target, output, "release", Refused::Release, command)
        }
        ReservationCommand::Report { namespace_id, numd, target, output } => {
            let bytes = (numd.min(32 * 1024 - 1) + 1) * 4;
            let session = Session::open(&target)?;
            let completion = session
                .controller()
                .io_command(commands::reservation_report(NamespaceId(namespace_id), bytes, true))
                .map_err(|error| {
                    command_error("resv-report", error, StatusContext::Io, |status| explain(Refused::Report, status))
                })?;
            let report = decode_report(&completion.data);
            if output.json() {
                print_json(&report)
            } else {
                print_text(&text_of(&report))
            }
        }
    }
}

/// The extended Reservation Status data structure as nvme-cli's JSON names it.
fn decode_report(data: &[u8]) -> Value {
    let u16_at =
        |offset: usize| data.get(offset..offset + 2).map_or(0, |bytes| u16::from_le_bytes([bytes[0], bytes[1]]));
    let u64_at = |offset: usize| {
        data.get(offset..offset + 8).map_or(0, |bytes| u64::from_le_bytes(bytes.try_into().unwrap_or([0; 8])))
    };
    let generation = data.get(0..4).map_or(0, |bytes| u32::from_le_bytes(bytes.try_into().unwrap_or([0; 4])));
    let registered = usize::from(u16_at(5));
    let mut controllers = Vec::new();
    for index in 0..registered {
        let offset = 64 + index * 64;
        let Some(entry) = data.get(offset..offset + 64) else { break };
        controllers.push(json!({
            "cntlid": u16_at(offset),
            "rcsts": entry[2],
            "rkey": u64_at(offset + 8),
            "hostid": entry[16..32].iter().map(|byte| format!("{byte:02x}")).collect::<String>(),
        }));
    }
    json!({
        "gen": generation,
        "rtype": data.get(4).copied().unwrap_or(0),
        "regctl": registered,
        "ptpls": data.get(9).copied().unwrap_or(0),
        "regctlext": controllers,
    })
}

fn text_of(report: &Value) -> String {
    let mut out = format!(
        "NVME Reservation status:\n\ngen       : {}\nrtype     : {}\nregctl    : {}\nptpls     : {}\n",
        report["gen"], report["rtype"], report["regctl"], report["ptpls"]
    );
    for (index, controller) in report["regctlext"].as_array().into_iter().flatten().enumerate() {
        out.push_str(&format!(
            "regctlext[{index}] :\n  cntlid     : {:x}\n  rcsts      : {:x}\n  rkey       : {:x}\n  hostid     : {}\n",
            controller["cntlid"].as_u64().unwrap_or(0),
            controller["rcsts"].as_u64().unwrap_or(0),
            controller["rkey"].as_u64().unwrap_or(0),
            controller["hostid"].as_str().unwrap_or_default()
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_extended_report_decodes_like_nvme_cli_prints_it() {
        let mut data = vec![0u8; 128];
        data[0..4].copy_from_slice(&3u32.to_le_bytes());
        data[4] = 1;
        data[5] = 1;
        data[64..66].copy_from_slice(&7u16.to_le_bytes());
        data[66] = 1;
        data[72..80].copy_from_slice(&0xABCDu64.to_le_bytes());
        data[80..96].copy_from_slice(&[0x11; 16]);
        let report = decode_report(&data);
        assert_eq!(report["gen"], 3);
        assert_eq!(report["rtype"], 1);
        assert_eq!(report["regctlext"][0]["cntlid"], 7);
        assert_eq!(report["regctlext"][0]["rkey"], 0xABCD);
        assert_eq!(report["regctlext"][0]["hostid"], "11".repeat(16));
        assert!(text_of(&report).contains("rkey       : abcd"));
    }
}
