//! Closed-loop load generator: one io_uring thread, `connections` sockets, each
//! keeping `depth` 72-byte requests outstanding. A request's latency runs from
//! the moment its send is submitted to the moment its full 4120-byte response
//! has been received (responses arrive in order per connection).

use std::collections::VecDeque;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use io_uring::{opcode, types, IoUring};

use crate::common::{set_nodelay, REQUEST_BYTES, RESPONSE_BYTES};

pub struct ClientResult {
    pub requests_per_second: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub server_cpu_us_per_request: f64,
    pub server_cpu_percent: f64,
    pub client_cpu_percent: f64,
}

const KIND_RECV: u64 = 1;
const KIND_SEND: u64 = 2;

struct Connection {
    stream: TcpStream,
    recv_buffer: Vec<u8>,
    /// Bytes of a response received so far (responses are counted, not parsed).
    partial_response_bytes: usize,
    /// Send time of every request whose response has not fully arrived.
    sent_at: VecDeque<Instant>,
    /// Requests produced but not yet handed to a send.
    waiting_requests: usize,
    /// (offset, length) of the in-flight send within `requests`.
    in_flight: Option<(usize, usize)>,
}

/// Server CPU time in nanoseconds, summed over every thread of `pid`.
fn server_cpu_ns(pid: u32) -> u64 {
    let mut total = 0;
    if let Ok(entries) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for entry in entries.flatten() {
            if let Ok(text) = std::fs::read_to_string(entry.path().join("schedstat")) {
                total += text.split_whitespace().next().and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
            }
        }
    }
    total
}

/// utime + stime of `pid` from /proc/<pid>/stat, in nanoseconds (10 ms ticks).
fn server_stat_ns(pid: u32) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the ")" that closes the command name; utime/stime are fields 14/15.
    let after = text.rsplit_once(')').map(|(_, rest)| rest).unwrap_or("");
    let fields: Vec<&str> = after.split_whitespace().collect();
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    let parse = |index: usize| fields.get(index).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    // `after` starts at field 3 (state), so field N is at index N - 3.
    (parse(14 - 3) + parse(15 - 3)) * 1_000_000_000 / ticks
}

fn own_cpu_ns() -> u64 {
    // SAFETY: getrusage writes into the zeroed struct we pass.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_THREAD, &mut usage);
        usage
    };
    let micros = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    (micros(usage.ru_utime) + micros(usage.ru_stime)) * 1000
}

pub fn run(
    address: SocketAddr,
    connection_count: usize,
    depth: usize,
    warmup: Duration,
    measure: Duration,
    server_pid: u32,
) -> ClientResult {
    // Pin the client to the last core: a one-thread server owns core 0 and the
    // client core 1; a two-thread server shares core 1 with the client.
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    crate::common::pin_to_core(cores - 1);
    let mut ring = IoUring::new(1024).unwrap();
    let requests: Vec<u8> = (0..depth * REQUEST_BYTES).map(|i| (i / REQUEST_BYTES) as u8).collect();
    let mut connections: Vec<Connection> = (0..connection_count)
        .map(|_| {
            let stream = TcpStream::connect(address).expect("connect");
            set_nodelay(stream.as_raw_fd());
            Connection {
                stream,
                recv_buffer: vec![0; 256 * 1024],
                partial_response_bytes: 0,
                sent_at: VecDeque::with_capacity(depth),
                waiting_requests: depth,
                in_flight: None,
            }
        })
        .collect();
    for (index, connection) in connections.iter_mut().enumerate() {
        arm_recv(&mut ring, connection, index);
        start_send(&mut ring, connection, index, &requests);
    }

    let mut latencies_ns: Vec<u32> = Vec::with_capacity(4_000_000);
    let start = Instant::now();
    let measure_start = start + warmup;
    let measure_end = measure_start + measure;
    let mut measuring = false;
    let mut completed_in_window = 0u64;
    let (mut server_cpu_start, mut server_stat_start, mut client_cpu_start) = (0, 0, 0);
    let timeout = types::Timespec::new().nsec(50_000_000);
    let submit_args = types::SubmitArgs::new().timespec(&timeout);
    loop {
        let now = Instant::now();
        if !measuring && now >= measure_start {
            measuring = true;
            server_cpu_start = server_cpu_ns(server_pid);
            server_stat_start = server_stat_ns(server_pid);
            client_cpu_start = own_cpu_ns();
        }
        if now >= measure_end {
            break;
        }
        match ring.submitter().submit_with_args(1, &submit_args) {
            Ok(_) => {}
            Err(error) if error.raw_os_error() == Some(libc::ETIME) => {}
            Err(error) if error.raw_os_error() == Some(libc::EINTR) => {}
            Err(error) => panic!("submit: {error}"),
        }
        let completions: Vec<(u64, i32)> = ring.completion().map(|c| (c.user_data(), c.result())).collect();
        let now = Instant::now();
        for (data, result) in completions {
            let index = (data & 0xffff_ffff) as usize;
            let connection = &mut connections[index];
            assert!(result > 0, "connection {index} failed: {result}");
            if data >> 32 == KIND_RECV {
                connection.partial_response_bytes += result as usize;
                let done = connection.partial_response_bytes / RESPONSE_BYTES;
                connection.partial_response_bytes %= RESPONSE_BYTES;
                for _ in 0..done {
                    let sent_at = connection.sent_at.pop_front().expect("response without request");
                    if measuring {
                        latencies_ns.push(now.duration_since(sent_at).as_nanos().min(u32::MAX as u128) as u32);
                        completed_in_window += 1;
                    }
                }
                connection.waiting_requests += done;
                arm_recv(&mut ring, connection, index);
                start_send(&mut ring, connection, index, &requests);
            } else {
                let (offset, length) = connection.in_flight.take().unwrap();
                let sent = result as usize;
                if sent < length {
                    submit_send(&mut ring, connection, index, &requests, offset + sent, length - sent);
                } else {
                    start_send(&mut ring, connection, index, &requests);
                }
            }
        }
    }
    let elapsed = measure_start.elapsed().as_secs_f64();
    // Stop the traffic and wait for every outstanding recv/send to complete, so
    // no kernel operation still points into a buffer when `connections` drops.
    for connection in &connections {
        let _ = connection.stream.shutdown(std::net::Shutdown::Both);
    }
    let drain_deadline = Instant::now() + Duration::from_secs(2);
    let mut outstanding = connections.iter().map(|c| 1 + c.in_flight.is_some() as usize).sum::<usize>();
    while outstanding > 0 && Instant::now() < drain_deadline {
        let _ = ring.submitter().submit_with_args(1, &submit_args);
        outstanding -= ring.completion().count();
    }
    let server_cpu = server_cpu_ns(server_pid) - server_cpu_start;
    let server_stat = server_stat_ns(server_pid) - server_stat_start;
    let client_cpu = own_cpu_ns() - client_cpu_start;
    latencies_ns.sort_unstable();
    let percentile = |p: f64| {
        if latencies_ns.is_empty() {
            return f64::NAN;
        }
        let index = ((latencies_ns.len() as f64 - 1.0) * p).round() as usize;
        latencies_ns[index] as f64 / 1000.0
    };
    let requests = completed_in_window.max(1) as f64;
    // schedstat is exact; /proc/<pid>/stat has 10 ms ticks. Use schedstat when present.
    let server_ns = if server_cpu > 0 { server_cpu } else { server_stat };
    ClientResult {
        requests_per_second: completed_in_window as f64 / elapsed,
        p50_us: percentile(0.50),
        p99_us: percentile(0.99),
        server_cpu_us_per_request: server_ns as f64 / 1000.0 / requests,
        server_cpu_percent: server_ns as f64 / 1e9 / elapsed * 100.0,
        client_cpu_percent: client_cpu as f64 / 1e9 / elapsed * 100.0,
    }
}

fn arm_recv(ring: &mut IoUring, connection: &mut Connection, index: usize) {
    let entry = opcode::Recv::new(
        types::Fd(connection.stream.as_raw_fd()),
        connection.recv_buffer.as_mut_ptr(),
        connection.recv_buffer.len() as u32,
    )
    .build()
    .user_data((KIND_RECV << 32) | index as u64);
    // SAFETY: the buffer lives in `connections`; `run` waits for every outstanding
    // operation to complete (after shutting the sockets down) before dropping it.
    unsafe { ring.submission().push(&entry).expect("submission queue full") };
}

fn start_send(ring: &mut IoUring, connection: &mut Connection, index: usize, requests: &[u8]) {
    if connection.in_flight.is_some() || connection.waiting_requests == 0 {
        return;
    }
    let count = connection.waiting_requests;
    connection.waiting_requests = 0;
    let now = Instant::now();
    for _ in 0..count {
        connection.sent_at.push_back(now);
    }
    submit_send(ring, connection, index, requests, 0, count * REQUEST_BYTES);
}

fn submit_send(
    ring: &mut IoUring,
    connection: &mut Connection,
    index: usize,
    requests: &[u8],
    offset: usize,
    length: usize,
) {
    connection.in_flight = Some((offset, length));
    let entry = opcode::Send::new(
        types::Fd(connection.stream.as_raw_fd()),
        requests[offset..].as_ptr(),
        length as u32,
    )
    .build()
    .user_data((KIND_SEND << 32) | index as u64);
    // SAFETY: `requests` outlives every operation (see arm_recv).
    unsafe { ring.submission().push(&entry).expect("submission queue full") };
}
