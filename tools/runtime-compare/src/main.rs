//! Loopback NVMe/TCP-shaped request/response benchmark.
//!
//! `runtime-compare all [--seconds S]` runs the whole matrix and prints a
//! markdown table. Each cell: the server runs in a child process (so its CPU
//! can be read from /proc/<pid>/stat and /proc/<pid>/task/*/schedstat without
//! counting the client), the client is one io_uring thread in this process
//! keeping `connections x depth` requests outstanding (closed loop).
//!
//! `runtime-compare bench --server S --threads T --connections C --depth D`
//! runs one cell; `runtime-compare serve ...` is the child.

mod client;
mod common;
#[cfg(feature = "glommio")]
mod glommio_server;
mod monoio_server;
mod sluice_server;
mod uring_server;

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use client::ClientResult;

struct Args(Vec<String>);

impl Args {
    fn value(&self, name: &str, default: &str) -> String {
        self.0
            .iter()
            .position(|arg| arg == name)
            .and_then(|index| self.0.get(index + 1).cloned())
            .unwrap_or_else(|| default.to_string())
    }
    fn number(&self, name: &str, default: u64) -> u64 {
        self.value(name, &default.to_string()).parse().expect(name)
    }
}

fn servers() -> Vec<&'static str> {
    let mut names = vec!["uring-sleep", "uring-sleep-defer", "uring-sleep-defer-bufring", "uring-busy-defer", "sluice-runtime", "monoio"];
    if cfg!(feature = "glommio") {
        names.push("glommio");
    }
    names
}

fn serve(server: &str, address: SocketAddr, threads: usize) {
    match server {
        "uring-sleep" => uring_server::run(
            address,
            threads,
            uring_server::UringOptions { busy_poll: false, defer_taskrun: false, buffer_ring: false },
        ),
        "uring-sleep-defer" => uring_server::run(
            address,
            threads,
            uring_server::UringOptions { busy_poll: false, defer_taskrun: true, buffer_ring: false },
        ),
        "uring-sleep-defer-bufring" => uring_server::run(
            address,
            threads,
            uring_server::UringOptions { busy_poll: false, defer_taskrun: true, buffer_ring: true },
        ),
        "uring-busy" => uring_server::run(
            address,
            threads,
            uring_server::UringOptions { busy_poll: true, defer_taskrun: false, buffer_ring: false },
        ),
        "uring-busy-defer" => uring_server::run(
            address,
            threads,
            uring_server::UringOptions { busy_poll: true, defer_taskrun: true, buffer_ring: false },
        ),
        "sluice-runtime" => sluice_server::run(address, threads, false),
        "sluice-runtime-busy" => sluice_server::run(address, threads, true),
        "monoio" => monoio_server::run(address, threads),
        #[cfg(feature = "glommio")]
        "glommio" => glommio_server::run(address, threads),
        other => panic!("unknown server {other}"),
    }
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// Kills the server child when dropped, so a panic in the client never leaves it running.
struct ServerProcess(Child);

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_until_listening(address: SocketAddr) {
    for _ in 0..200 {
        if std::net::TcpStream::connect(address).is_ok() {
            // Give the other SO_REUSEPORT threads a moment to bind as well.
            std::thread::sleep(Duration::from_millis(100));
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("server at {address} never started listening");
}

struct Cell {
    server: String,
    threads: usize,
    connections: usize,
    depth: usize,
    result: ClientResult,
}

fn run_cell(
    server: &str,
    threads: usize,
    connections: usize,
    depth: usize,
    warmup: Duration,
    measure: Duration,
) -> Cell {
    let address: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["serve", "--server", server, "--threads", &threads.to_string()])
        .args(["--address", &address.to_string()])
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn server");
    let process = ServerProcess(child);
    wait_until_listening(address);
    let result = client::run(address, connections, depth, warmup, measure, process.0.id());
    drop(process);
    Cell { server: server.to_string(), threads, connections, depth, result }
}

fn print_header() {
    println!(
        "| server | server threads | conns x depth | requests/s | p50 us | p99 us | server CPU us/req | server CPU % (of 1 core) | client CPU % |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg").unwrap_or_default().split_whitespace().next().unwrap_or("?").to_string()
}

/// Per-metric median over rounds (each metric independently).
fn median_cell(mut cells: Vec<Cell>) -> Cell {
    fn median(values: &mut [f64]) -> f64 {
        values.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
        values[values.len() / 2]
    }
    let pick = |get: fn(&ClientResult) -> f64| median(&mut cells.iter().map(|c| get(&c.result)).collect::<Vec<_>>());
    let result = ClientResult {
        requests_per_second: pick(|r| r.requests_per_second),
        p50_us: pick(|r| r.p50_us),
        p99_us: pick(|r| r.p99_us),
        server_cpu_us_per_request: pick(|r| r.server_cpu_us_per_request),
        server_cpu_percent: pick(|r| r.server_cpu_percent),
        client_cpu_percent: pick(|r| r.client_cpu_percent),
    };
    let first = cells.swap_remove(0);
    Cell { result, ..first }
}

fn print_cell(cell: &Cell) {
    println!("{}", cell_line(cell));
}

fn cell_line(cell: &Cell) -> String {
    let r = &cell.result;
    format!(
        "| {} | {} | {}x{} | {:.0} | {:.1} | {:.1} | {:.2} | {:.0} | {:.0} |",
        cell.server,
        cell.threads,
        cell.connections,
        cell.depth,
        r.requests_per_second,
        r.p50_us,
        r.p99_us,
        r.server_cpu_us_per_request,
        r.server_cpu_percent,
        r.client_cpu_percent,
    )
}

fn main() {
    let args = Args(std::env::args().collect());
    let command = args.0.get(1).cloned().unwrap_or_else(|| "all".into());
    let warmup = Duration::from_millis(args.number("--warmup-ms", 500));
    let measure = Duration::from_millis(args.number("--seconds", 3) * 1000);
    match command.as_str() {
        "serve" => {
            let address: SocketAddr = args.value("--address", "127.0.0.1:7420").parse().unwrap();
            serve(&args.value("--server", "uring-sleep"), address, args.number("--threads", 1) as usize);
        }
        "bench" => {
            print_header();
            let cell = run_cell(
                &args.value("--server", "uring-sleep"),
                args.number("--threads", 1) as usize,
                args.number("--connections", 1) as usize,
                args.number("--depth", 1) as usize,
                warmup,
                measure,
            );
            print_cell(&cell);
        }
        "all" => {
            // Rounds interleave the servers so background load on the shared
            // machine hits all of them alike; each cell reports the median round.
            let rounds = args.number("--rounds", 3) as usize;
            let shapes = [(1usize, 1usize), (1, 32), (4, 32)];
            let only = args.value("--servers", "");
            let names: Vec<&str> =
                servers().into_iter().filter(|name| only.is_empty() || only.split(',').any(|o| o == *name)).collect();
            print_header();
            for threads in [1usize, 2] {
                for &(connections, depth) in &shapes {
                    let mut cells: Vec<Vec<Cell>> = names.iter().map(|_| Vec::new()).collect();
                    for round in 0..rounds {
                        for (index, server) in names.iter().enumerate() {
                            let cell = run_cell(server, threads, connections, depth, warmup, measure);
                            eprintln!("round {round} load {}: {}", load_average(), cell_line(&cell));
                            cells[index].push(cell);
                        }
                    }
                    for server_cells in cells {
                        print_cell(&median_cell(server_cells));
                    }
                }
            }
        }
        other => panic!("unknown command {other}; use all | bench | serve"),
    }
}
