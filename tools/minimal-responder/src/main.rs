//! minimal-responder: answers NVMe/TCP just well enough for a host
//! (spdk_nvme_perf, nvme-cli) to connect controllers and read 4 KiB blocks,
//! doing the least possible work per I/O. It is the "what the kernel path
//! allows" reference the scale measurements set Sluice's target beside; see
//! README.md.

mod controller;
mod send_batch;
mod server;
mod wire;

use std::io::Write;
use std::net::SocketAddrV4;
use std::process::ExitCode;

use server::{PollMode, Server};

const USAGE: &str = "usage: minimal-responder [--address 127.0.0.1:4420] [--core 0] [--poll-mode sleep|busy-poll]

Serves any subsystem NQN with one 1 GiB namespace of 4 KiB blocks whose reads
return zeros from memory. Prints `READY <address>` once listening.";

struct Options {
    address: SocketAddrV4,
    core: usize,
    poll_mode: PollMode,
}

fn parse_options() -> Result<Options, String> {
    let mut options =
        Options { address: SocketAddrV4::new([127, 0, 0, 1].into(), 4420), core: 0, poll_mode: PollMode::Sleep };
    let mut arguments = std::env::args().skip(1);
    while let Some(argument) = arguments.next() {
        if argument == "-h" || argument == "--help" {
            return Err(String::new());
        }
        let value = arguments.next().ok_or_else(|| format!("{argument} needs a value"))?;
        match argument.as_str() {
            "--address" => {
                options.address = value.parse().map_err(|_| format!("--address: not an IPv4 address:port: {value}"))?;
            }
            "--core" => options.core = value.parse().map_err(|_| format!("--core: not a number: {value}"))?,
            "--poll-mode" => {
                options.poll_mode = match value.as_str() {
                    "sleep" => PollMode::Sleep,
                    "busy-poll" => PollMode::BusyPoll,
                    _ => return Err(format!("--poll-mode is sleep or busy-poll, not {value}")),
                }
            }
            _ => return Err(format!("unknown argument {argument}")),
        }
    }
    Ok(options)
}

/// Raises the open-file limit to its hard limit: every connection is a file,
/// and the scale runs open over 1,000 of them.
fn raise_file_limit() {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit with a valid pointer to an rlimit we own.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

/// Pins the calling (the only) thread to `core`, as the targets it is compared
/// with are pinned.
fn pin_to_core(core: usize) -> std::io::Result<()> {
    // SAFETY: cpu_set_t is plain data (all-zero is the empty set); CPU_SET
    // ignores cores beyond the set's size; sched_setaffinity(0) is this thread.
    let result = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(core, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if result == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn main() -> ExitCode {
    let options = match parse_options() {
        Ok(options) => options,
        Err(message) => {
            if !message.is_empty() {
                eprintln!("minimal-responder: {message}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(if message.is_empty() { 0 } else { 2 });
        }
    };
    raise_file_limit();
    if let Err(error) = pin_to_core(options.core) {
        eprintln!("minimal-responder: cannot pin to core {}: {error}", options.core);
        return ExitCode::FAILURE;
    }
    let mut server = match Server::bind(options.address, options.poll_mode) {
        Ok(server) => server,
        Err(error) => {
            eprintln!("minimal-responder: cannot listen on {}: {error}", options.address);
            return ExitCode::FAILURE;
        }
    };
    println!("READY {}", options.address);
    // stdout may be a pipe or file that a script polls for READY.
    let _ = std::io::stdout().flush();
    match server.run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("minimal-responder: {error}");
            ExitCode::FAILURE
        }
    }
}
