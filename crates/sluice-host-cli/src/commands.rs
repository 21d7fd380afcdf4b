//! One function per host subcommand: resolve the target, connect, issue the commands,
//! print, disconnect. Every failure becomes one line naming what failed and what to
//! do, with exit status 1 (target or network) or 2 (usage).

use std::fs::File;
use std::io::{self, Read, Write};
use std::path::Path;

use nvme_spec::log_page::{log_id, SmartHealthLog, SMART_HEALTH_LOG_BYTES};
use nvme_spec::{IdentifyNamespace, NamespaceId, Status};
use serde_json::{json, Value};

use super::args::{DataSize, OutputArgs, Purpose, TargetArgs};
use super::output::{self, ListRow, StatusContext};
use super::paths::IoSession;
use super::session::{command_error, connect_error, namespace_hint, no_hint, print_json, print_text, Session};
use super::{HostCommand, HostError, IoArgs};

/// Largest piece read or written per client call: keeps memory bounded for big
/// reads to stdout (the client splits each piece further at MDTS).
const MAX_CHUNK_BYTES: u64 = 1 << 20;

pub fn run(command: HostCommand) -> Result<(), HostError> {
    if let HostCommand::Read { io, .. } | HostCommand::Write { io, .. } | HostCommand::Compare { io, .. } = &command {
        // Before anything runs: the user learns that -z 1mb moves 1,000,000 bytes now.
        if let Some(warning) = io.data_size.as_ref().and_then(DataSize::warning) {
            eprintln!("{warning}");
        }
    }
    match command {
        HostCommand::Discover { target, output } => discover(&target, output),
        HostCommand::Connect { target, output } => connect(&target, output),
        HostCommand::List { target, output } => list(&target, output),
        HostCommand::ListNs { target, output } => list_ns(&target, output),
        HostCommand::IdCtrl { target, output, human_readable } => id_ctrl(&target, output, human_readable),
        HostCommand::IdNs { target, output, namespace_id, human_readable } => {
            id_ns(&target, output, namespace_id, human_readable)
        }
        HostCommand::SmartLog { target, output, namespace_id, human_readable } => {
            smart_log(&target, output, namespace_id, human_readable)
        }
        HostCommand::AnaLog { target, output } => super::ana::ana_log(&target, output),
        HostCommand::ListSubsys { target, output, namespace_id } => {
            super::paths::list_subsys(&target, output, namespace_id)
        }
        HostCommand::GetLog { target, output, log_id, log_len, namespace_id, lpo, raw_binary } => {
            get_log(&target, output, GetLog { log_id, log_len, namespace_id, offset: lpo, raw_binary })
        }
        HostCommand::GetFeature { target, output, feature_id, sel, namespace_id, cdw11, human_readable } => {
            get_feature(&target, output, feature_id, sel, namespace_id, cdw11, human_readable)
        }
        HostCommand::SetFeature { target, output, feature_id, value, namespace_id, save } => {
            set_feature(&target, output, feature_id, value, namespace_id, save)
        }
        HostCommand::Read { target, output, io } => read(&target, output, &io),
        HostCommand::Write { target, output, io, force_unit_access } => write(&target, output, &io, force_unit_access),
        HostCommand::Flush { target, output, namespace_id } => flush(&target, output, namespace_id),
        HostCommand::Compare { target, output, io } => compare(&target, output, &io),
        HostCommand::Copy { target, output, namespace_id, sdlba, slbs, blocks, force_unit_access } => {
            copy(&target, output, namespace_id, sdlba, &slbs, &blocks, force_unit_access)
        }
        HostCommand::Verify { target, output, namespace_id, start_block, block_count } => {
            verify(&target, output, namespace_id, start_block, block_count)
        }
        HostCommand::Namespace(command) => super::namespaces::run(command),
        HostCommand::Reservation(command) => super::reservations::run(command),
    }
}

// ---------------------------------------------------------------------------------
// Errors

// ---------------------------------------------------------------------------------
// Subcommands

fn discover(args: &TargetArgs, output: OutputArgs) -> Result<(), HostError> {
    let mut target = args.resolve(Purpose::Discovery)?;
    let options = target.take_options();
    let entries =
        nvme_host_client::discover(target.address, &options).map_err(|error| connect_error(&target, error))?;
    let generation = None;
    if output.json() {
        print_json(&output::discovery_json(generation, &entries))
    } else {
        print_text(&output::discovery_text(generation, &entries))
    }
}

fn connect(args: &TargetArgs, output: OutputArgs) -> Result<(), HostError> {
    let session = Session::open(args)?;
    let controller = session.controller();
    let id = controller.identify();
    let namespaces = session.active_namespaces()?;
    let io_queues = controller.io_queue_count();
    let cntlid = controller.controller_id().0;
    let subnqn = id.subsystem_nqn_str().unwrap_or("").to_string();
    if output.json() {
        print_json(&json!({
            "device": session.target.url,
            "traddr": session.target.address.ip().to_string(),
            "trsvcid": session.target.address.port().to_string(),
            "subnqn": subnqn,
            "cntlid": cntlid,
            "sn": output::ascii_field(&id.serial_number),
            "mn": output::ascii_field(&id.model_number),
            "fr": output::ascii_field(&id.firmware_revision),
            "namespaces": namespaces,
            "io_queues": io_queues,
            "io_queues_requested": args.nr_io_queues,
        }))?;
    } else {
        let list = namespaces.iter().map(u32::to_string).collect::<Vec<_>>().join(", ");
        print_text(&format!(
            "connected to {}\ncntlid     : {cntlid:#x}\nsubnqn     : {subnqn}\nmn         : {}\nsn         : {}\nfr         : {}\nnamespaces : {} ({list})\nio queues  : {io_queues} granted ({} requested)\ndisconnected (sluice has no kernel device: this was a connectivity check)\n",
            session.target.url,
            output::ascii_field(&id.model_number),
            output::ascii_field(&id.serial_number),
            output::ascii_field(&id.firmware_revision),
            namespaces.len(),
            args.nr_io_queues,
        ))?;
    }
    drop(session);
    Ok(())
}

fn list(args: &TargetArgs, output: OutputArgs) -> Result<(), HostError> {
    let session = Session::open(args)?;
    let id = *session.controller().identify();
    let mut rows = Vec::new();
    for nsid in session.active_namespaces()? {
        let ns = session.identify_namespace(nsid)?;
        let format = ns.formatted_lba_format().unwrap_or_default();
        let block_bytes = format.block_size_bytes().unwrap_or(0);
        rows.push(ListRow {
            node: session.target.url.clone(),
            nsid,
            serial: output::ascii_field(&id.serial_number),
            model: output::ascii_field(&id.model_number),
            firmware: output::ascii_field(&id.firmware_revision),
            used_bytes: ns.namespace_utilization.saturating_mul(block_bytes),
            size_blocks: ns.namespace_size,
            block_bytes,
            metadata_bytes: format.metadata_size,
        });
    }
    if output.json() {
        print_json(&output::list_json(&rows))
    } else {
        print_text(&output::list_text(&rows))
    }
}

fn list_ns(args: &TargetArgs, output: OutputArgs) -> Result<(), HostError> {
    let session = Session::open(args)?;
    let namespaces = session.active_namespaces()?;
    if output.json() {
        let list: Vec<Value> = namespaces.iter().map(|nsid| json!({ "nsid": nsid })).collect();
        print_json(&json!({ "nsid_list": list }))
    } else {
        let text: String =
            namespaces.iter().enumerate().map(|(index, nsid)| format!("[{index:>4}]:{nsid:#x}\n")).collect();
        print_text(&text)
    }
}

fn id_ctrl(args: &TargetArgs, output: OutputArgs, human: bool) -> Result<(), HostError> {
    let session = Session::open(args)?;
    let id = session
        .controller()
        .identify_controller()
        .map_err(|error| command_error("identify controller", error, StatusContext::Admin, no_hint))?;
    if output.json() {
        print_json(&output::id_ctrl_json(&id))
    } else {
        print_text(&output::id_ctrl_text(&id, human))
    }
}

fn id_ns(args: &TargetArgs, output: OutputArgs, nsid: u32, human: bool) -> Result<(), HostError> {
    let session = Session::open(args)?;
    let ns = session.identify_namespace(nsid)?;
    if output.json() {
        print_json(&output::id_ns_json(&ns))
    } else {
        print_text(&output::id_ns_text(nsid, &ns, human))
    }
}

fn smart_log(args: &TargetArgs, output: OutputArgs, nsid: Option<u32>, human: bool) -> Result<(), HostError> {
    let session = Session::open(args)?;
    let controller = session.controller();
    let log = match nsid {
        None => controller.smart_log(),
        Some(nsid) => controller
            .get_log_page(log_id::SMART_HEALTH, NamespaceId(nsid), 0, SMART_HEALTH_LOG_BYTES as u32)
            .map(|bytes| {
                let mut raw = [0u8; SMART_HEALTH_LOG_BYTES];
                let length = bytes.len().min(raw.len());
                raw[..length].copy_from_slice(&bytes[..length]);
                SmartHealthLog::decode(&raw)
            }),
    }
    .map_err(|error| {
        command_error("smart-log", error, StatusContext::Admin, |status| match (status.code_type(), status.code()) {
            (0x0, 0x02) | (0x0, 0x0B) => "the controller keeps SMART data per controller only: drop -N".to_string(),
            _ => String::new(),
        })
    })?;
    let nsid = nsid.unwrap_or(NamespaceId::BROADCAST.0);
    if output.json() {
        print_json(&output::smart_json(&log))
    } else {
        print_text(&output::smart_text(&session.target.url, nsid, &log, human))
    }
}

struct GetLog {
    log_id: u8,
    log_len: u32,
    namespace_id: u32,
    offset: u64,
    raw_binary: bool,
}

fn get_log(args: &TargetArgs, output: OutputArgs, request: GetLog) -> Result<(), HostError> {
    if request.log_len == 0 {
        return Err(HostError::usage("--log-len must be at least 1 (bytes to read)"));
    }
    if request.offset & 3 != 0 || request.log_len & 3 != 0 {
        return Err(HostError::usage("--log-len and --lpo must be multiples of 4 (Get Log Page counts dwords)"));
    }
    let session = Session::open(args)?;
    let log_id = request.log_id;
    let data = session
        .controller()
        .get_log_page(log_id, NamespaceId(request.namespace_id), request.offset, request.log_len)
        .map_err(|error| {
            command_error(&format!("get-log (log id {log_id:#04x})"), error, StatusContext::Admin, |status| {
                match (status.code_type(), status.code()) {
                    (0x1, 0x09) => format!("the controller does not support log page {log_id:#04x}"),
                    (0x0, 0x02) => "the controller refused a field: check -N and --lpo".to_string(),
                    _ => String::new(),
                }
            })
        })?;
    if request.raw_binary {
        let mut stdout = io::stdout().lock();
        return stdout
            .write_all(&data)
            .and_then(|()| stdout.flush())
            .map_err(|error| HostError::runtime(format!("cannot write to stdout: {error}")));
    }
    if output.json() {
        print_json(&json!({
            "device": session.target.url,
            "log_id": log_id,
            "namespace_id": request.namespace_id,
            "offset": request.offset,
            "length": data.len(),
            "data": output::hex_string(&data),
        }))
    } else {
        print_text(&format!(
            "Device:{} log-id:{log_id} namespace-id:{:#x}\n{}",
            session.target.url,
            request.namespace_id,
            output::hex_dump(&data)
        ))
    }
}

fn feature_hint(feature_id: u8) -> impl FnOnce(Status) -> String {
    move |status| match (status.code_type(), status.code()) {
        (0x0, 0x02) => format!(
            "the controller does not support feature {feature_id:#04x} ({}) or this value",
            output::feature_name(feature_id)
        ),
        (0x1, 0x0D) => "the feature cannot be saved: drop --save".to_string(),
        (0x1, 0x0E) => "the feature cannot be changed".to_string(),
        (0x0, 0x0C) if feature_id == nvme_spec::features::feature_id::NUMBER_OF_QUEUES => {
            "Number of Queues can only be set before the I/O queues exist: use -i/--nr-io-queues".to_string()
        }
        _ => String::new(),
    }
}

fn get_feature(
    args: &TargetArgs,
    output: OutputArgs,
    feature_id: u8,
    select: u8,
    nsid: u32,
    cdw11: u32,
    human: bool,
) -> Result<(), HostError> {
    let session = Session::open(args)?;
    let value = session
        .controller()
        .get_feature(feature_id, NamespaceId(nsid), select, cdw11)
        .map_err(|error| command_error("get-feature", error, StatusContext::Admin, feature_hint(feature_id)))?;
    if output.json() {
        print_json(&output::get_feature_json(feature_id, select, value))
    } else {
        print_text(&output::get_feature_text(feature_id, select, value, human))
    }
}

fn set_feature(
    args: &TargetArgs,
    output: OutputArgs,
    feature_id: u8,
    value: u32,
    nsid: u32,
    save: bool,
) -> Result<(), HostError> {
    let session = Session::open(args)?;
    let result = session
        .controller()
        .set_feature(feature_id, NamespaceId(nsid), value, save)
        .map_err(|error| command_error("set-feature", error, StatusContext::Admin, feature_hint(feature_id)))?;
    if output.json() {
        print_json(&output::set_feature_json(feature_id, value, save, result))
    } else {
        print_text(&output::set_feature_text(feature_id, value, save, result))
    }
}

fn flush(args: &TargetArgs, output: OutputArgs, nsid: u32) -> Result<(), HostError> {
    let mut session = IoSession::open(args, nsid)?;
    session.flush(nsid).map_err(|error| command_error("flush", error, StatusContext::Io, namespace_hint(nsid)))?;
    if output.json() {
        print_json(&json!({ "command": "flush", "namespace_id": nsid, "result": "success" }))
    } else {
        print_text("NVMe Flush: success\n")
    }
}

fn verify(
    args: &TargetArgs,
    output: OutputArgs,
    nsid: u32,
    start_block: u64,
    block_count: u32,
) -> Result<(), HostError> {
    let blocks = block_count
        .checked_add(1)
        .filter(|&blocks| blocks <= 65536)
        .ok_or_else(|| HostError::usage("--block-count is 0's based and at most 65535 (65536 blocks)"))?;
    let mut session = IoSession::open(args, nsid)?;
    session
        .io_command(nvme_host::commands::verify(NamespaceId(nsid), start_block, blocks))
        .map_err(|error| command_error("verify", error, StatusContext::Io, namespace_hint(nsid)))?;
    if output.json() {
        print_json(&json!({ "command": "verify", "namespace_id": nsid, "result": "success" }))
    } else {
        print_text("NVMe Verify: success\n")
    }
}

// ---------------------------------------------------------------------------------
// read / write

/// Blocks and bytes of one read or write.
#[derive(Debug, PartialEq, Eq)]
struct Transfer {
    blocks: u64,
    bytes: u64,
}

/// Works out the transfer from -c (0's based), -z and, for a write without either,
/// the input's length.
fn plan_transfer(io: &IoArgs, block_bytes: u64, input_len: Option<u64>) -> Result<Transfer, HostError> {
    let data_size = io.data_size_bytes().filter(|&size| size > 0);
    match (io.block_count, data_size, input_len) {
        (Some(count), size, _) => {
            let blocks = u64::from(count) + 1;
            let capacity = blocks * block_bytes;
            let bytes = size.unwrap_or(capacity);
            if bytes > capacity {
                return Err(HostError::usage(format!(
                    "--data-size {bytes} is more than --block-count {count} covers ({blocks} blocks of {block_bytes} bytes = {capacity}); raise -c or lower -z"
                )));
            }
            Ok(Transfer { blocks, bytes })
        }
        (None, Some(size), _) => Ok(Transfer { blocks: size.div_ceil(block_bytes), bytes: size }),
        (None, None, Some(0)) => Err(HostError::usage("the write input is empty: give -d FILE with data, or -c/-z")),
        (None, None, Some(len)) => Ok(Transfer { blocks: len.div_ceil(block_bytes), bytes: len }),
        (None, None, None) => Ok(Transfer { blocks: 1, bytes: block_bytes }),
    }
}

/// Blocks per client call: [`MAX_CHUNK_BYTES`] worth, at least one.
fn blocks_per_call(block_bytes: u64) -> u64 {
    (MAX_CHUNK_BYTES / block_bytes).max(1)
}

/// The namespace's block size, or a runtime error for a namespace without a usable
/// format.
fn block_size(nsid: u32, ns: &IdentifyNamespace) -> Result<u64, HostError> {
    if ns.namespace_size == 0 {
        // Identify Namespace of an inactive NSID succeeds with all zeros.
        return Err(HostError::runtime(format!(
            "namespace {nsid} is not active on this subsystem; `sluice list-ns` lists the active ones"
        )));
    }
    ns.formatted_lba_format().and_then(|format| format.block_size_bytes()).ok_or_else(|| {
        HostError::runtime(format!(
            "namespace {nsid} reports no usable LBA format (is it active? `sluice list-ns` lists the active ones)"
        ))
    })
}

fn lba_hint(ns: &IdentifyNamespace, block_bytes: u64) -> impl FnOnce(Status) -> String {
    let size = ns.namespace_size;
    move |status| match (status.code_type(), status.code()) {
        (0x0, 0x80) => {
            format!("the namespace has {size} blocks of {block_bytes} bytes (LBAs 0..={})", size.saturating_sub(1))
        }
        (0x0, 0x0B) => "the namespace is not active; `sluice list-ns` lists the active ones".to_string(),
        _ => String::new(),
    }
}

fn read(args: &TargetArgs, output: OutputArgs, io_args: &IoArgs) -> Result<(), HostError> {
    if output.json() && io_args.data.is_none() {
        return Err(HostError::usage("read -o json prints a summary: give -d FILE for the data"));
    }
    let nsid = io_args.namespace_id;
    let mut session = IoSession::open(args, nsid)?;
    let ns = session.identify_namespace(nsid)?;
    let block_bytes = block_size(nsid, &ns)?;
    let transfer = plan_transfer(io_args, block_bytes, None)?;
    let mut sink: Box<dyn Write> = match &io_args.data {
        Some(path) => Box::new(io::BufWriter::new(create_output(path)?)),
        None => Box::new(io::stdout().lock()),
    };
    let per_call = blocks_per_call(block_bytes);
    let mut lba = io_args.start_block;
    let mut blocks_left = transfer.blocks;
    let mut bytes_left = transfer.bytes;
    while blocks_left > 0 {
        let blocks = blocks_left.min(per_call);
        let data = session
            .read(nsid, lba, blocks as u32)
            .map_err(|error| command_error("read", error, StatusContext::Io, lba_hint(&ns, block_bytes)))?;
        let keep = (data.len() as u64).min(bytes_left) as usize;
        sink.write_all(&data[..keep]).map_err(|error| output_error(io_args, &error))?;
        bytes_left -= keep as u64;
        blocks_left -= blocks;
        lba += blocks;
    }
    sink.flush().map_err(|error| output_error(io_args, &error))?;
    drop(sink);
    io_summary("read", output, nsid, io_args.start_block, &transfer)
}

/// What `write` and `compare` send: the session, the namespace, its block size, the
/// planned transfer and the input cut to exactly its bytes and padded with zeros to
/// whole blocks. The input is read before connecting, so a missing file is a usage
/// error that costs no connection.
struct HostBlocks {
    session: IoSession,
    ns: IdentifyNamespace,
    block_bytes: u64,
    transfer: Transfer,
    input: Vec<u8>,
}

fn host_blocks(args: &TargetArgs, io_args: &IoArgs) -> Result<HostBlocks, HostError> {
    let mut input = read_input(io_args)?;
    let nsid = io_args.namespace_id;
    let session = IoSession::open(args, nsid)?;
    let ns = session.identify_namespace(nsid)?;
    let block_bytes = block_size(nsid, &ns)?;
    let explicit = io_args.block_count.is_some() || io_args.data_size_bytes().is_some_and(|size| size > 0);
    let transfer = plan_transfer(io_args, block_bytes, (!explicit).then_some(input.len() as u64))?;
    input.truncate(transfer.bytes as usize);
    input.resize((transfer.blocks * block_bytes) as usize, 0);
    Ok(HostBlocks { session, ns, block_bytes, transfer, input })
}

fn write(args: &TargetArgs, output: OutputArgs, io_args: &IoArgs, fua: bool) -> Result<(), HostError> {
    let HostBlocks { mut session, ns, block_bytes, transfer, input } = host_blocks(args, io_args)?;
    let nsid = io_args.namespace_id;
    let per_call = blocks_per_call(block_bytes);
    let mut lba = io_args.start_block;
    for chunk in input.chunks((per_call * block_bytes) as usize) {
        session
            .write(nsid, lba, chunk, fua)
            .map_err(|error| command_error("write", error, StatusContext::Io, lba_hint(&ns, block_bytes)))?;
        lba += chunk.len() as u64 / block_bytes;
    }
    io_summary("write", output, nsid, io_args.start_block, &transfer)
}

fn copy(
    args: &TargetArgs,
    output: OutputArgs,
    nsid: u32,
    destination: u64,
    starts: &[u64],
    lengths: &[u32],
    fua: bool,
) -> Result<(), HostError> {
    if starts.len() != lengths.len() {
        return Err(HostError::usage(format!(
            "--slbs has {} entries and --blocks {}: give one length per source range",
            starts.len(),
            lengths.len()
        )));
    }
    if lengths.iter().any(|&length| length > 65535) {
        return Err(HostError::usage("--blocks entries are 0's based and at most 65535 (65536 blocks)"));
    }
    let ranges: Vec<(u64, u32)> = starts.iter().zip(lengths).map(|(&lba, &length)| (lba, length + 1)).collect();
    let session = Session::open(args)?;
    session
        .controller()
        .copy(NamespaceId(nsid), destination, &ranges, fua)
        .map_err(|error| command_error("copy", error, StatusContext::Io, namespace_hint(nsid)))?;
    if output.json() {
        print_json(
            &json!({ "command": "copy", "namespace_id": nsid, "sdlba": destination, "ranges": ranges.len(), "result": "success" }),
        )
    } else {
        print_text("NVMe Copy: success\n")
    }
}

/// Compare: the input, padded with zeros to whole blocks like `write`, against the
/// blocks from --start-block; one command per MDTS.
fn compare(args: &TargetArgs, output: OutputArgs, io_args: &IoArgs) -> Result<(), HostError> {
    let HostBlocks { mut session, ns, block_bytes, transfer, input } = host_blocks(args, io_args)?;
    let nsid = io_args.namespace_id;
    // Compare is one command per call, so MDTS bounds it too.
    let per_call = blocks_per_call(block_bytes).min((u64::from(session.max_transfer_bytes()) / block_bytes).max(1));
    let mut lba = io_args.start_block;
    for chunk in input.chunks((per_call * block_bytes) as usize) {
        let equal = session
            .compare(nsid, lba, chunk)
            .map_err(|error| command_error("compare", error, StatusContext::Io, lba_hint(&ns, block_bytes)))?;
        if !equal {
            let last = lba + chunk.len() as u64 / block_bytes - 1;
            if output.json() {
                print_json(&json!({
                    "command": "compare", "namespace_id": nsid, "result": "compare failure",
                    "first_block": lba, "last_block": last,
                }))?;
            }
            return Err(HostError::runtime(format!(
                "compare: NVMe status: Compare Failure: the data differs from blocks {lba}..={last} of namespace {nsid}"
            )));
        }
        lba += chunk.len() as u64 / block_bytes;
    }
    io_summary("compare", output, nsid, io_args.start_block, &transfer)
}

/// nvme-cli prints "read: Success" to stderr (stdout may carry the data); JSON goes to
/// stdout.
fn io_summary(command: &str, output: OutputArgs, nsid: u32, start: u64, transfer: &Transfer) -> Result<(), HostError> {
    if output.json() {
        print_json(&json!({
            "command": command,
            "namespace_id": nsid,
            "start_block": start,
            "blocks": transfer.blocks,
            "bytes": transfer.bytes,
            "result": "success",
        }))
    } else {
        eprintln!("{command}: Success");
        Ok(())
    }
}

fn read_input(io_args: &IoArgs) -> Result<Vec<u8>, HostError> {
    let limit = io_args
        .data_size_bytes()
        .filter(|&size| size > 0)
        .or(io_args.block_count.map(|count| (u64::from(count) + 1) * (1 << 16)))
        .unwrap_or(u64::MAX);
    let mut data = Vec::new();
    let result = match &io_args.data {
        Some(path) => File::open(path)
            .map_err(|error| HostError::usage(format!("cannot open {}: {error}", path.display())))?
            .take(limit)
            .read_to_end(&mut data),
        None => io::stdin().lock().take(limit).read_to_end(&mut data),
    };
    result.map_err(|error| {
        let source = io_args.data.as_deref().map_or("stdin".to_string(), |path| path.display().to_string());
        HostError::usage(format!("cannot read {source}: {error}"))
    })?;
    Ok(data)
}

fn create_output(path: &Path) -> Result<File, HostError> {
    File::create(path).map_err(|error| HostError::usage(format!("cannot create {}: {error}", path.display())))
}

fn output_error(io_args: &IoArgs, error: &io::Error) -> HostError {
    let sink = io_args.data.as_deref().map_or("stdout".to_string(), |path| path.display().to_string());
    HostError::runtime(format!("cannot write to {sink}: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io(count: Option<u32>, size: Option<u64>) -> IoArgs {
        let data_size = size.map(|bytes| DataSize { bytes, meaning_changed: None });
        IoArgs { namespace_id: 1, start_block: 0, block_count: count, data_size, data: None }
    }

    #[test]
    fn transfers() {
        assert_eq!(plan_transfer(&io(None, None), 512, None).unwrap(), Transfer { blocks: 1, bytes: 512 });
        assert_eq!(plan_transfer(&io(Some(7), None), 512, None).unwrap(), Transfer { blocks: 8, bytes: 4096 });
        assert_eq!(plan_transfer(&io(Some(7), Some(100)), 512, None).unwrap(), Transfer { blocks: 8, bytes: 100 });
        assert!(plan_transfer(&io(Some(0), Some(513)), 512, None).is_err());
        assert_eq!(plan_transfer(&io(None, Some(1000)), 512, None).unwrap(), Transfer { blocks: 2, bytes: 1000 });
        assert_eq!(plan_transfer(&io(None, None), 512, Some(1025)).unwrap(), Transfer { blocks: 3, bytes: 1025 });
        assert!(plan_transfer(&io(None, None), 512, Some(0)).is_err());
    }

    #[test]
    fn call_sizes() {
        assert_eq!(blocks_per_call(512), 2048);
        assert_eq!(blocks_per_call(4096), 256);
        assert_eq!(blocks_per_call(1 << 21), 1);
    }
}
