//! The management API over the network (`[management.network]`, mutual TLS) end to
//! end: `sluice serve` with throw-away CAs and certificates made at test time, driven
//! through the `sluice` CLI's `--api` and raw TLS connections. Listed clients do what
//! their access allows, everyone else is refused and changes nothing, changes are
//! audited without secrets, and no more than MAX_NETWORK_CLIENTS connections are held.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use openssl::ssl::{SslConnector, SslFiletype, SslMethod, SslVerifyMode};
use serde_json::Value;

use support::pki::{Authority, Issued};
use support::{managed_config, scratch_dir, ManagedServer, ServeSetup, BASE, SLUICE};

/// sluice's MAX_NETWORK_CLIENTS.
const MAX_NETWORK_CLIENTS: usize = 16;
/// ACCESS_DENIED of management_client::codes.
const ACCESS_DENIED: i64 = -32007;

/// A serving gateway with a network endpoint, and the certificates of its callers.
struct Gateway {
    server: ManagedServer,
    address: SocketAddr,
    ca: Authority,
    admin: Issued,
    monitor: Issued,
    /// Signed by `ca`, but not listed in the config.
    stranger: Issued,
    /// Signed by another CA, with a listed CN.
    impostor: Issued,
    other_ca: Authority,
}

/// Stderr to DIR/serve.log with the audit target at info, everything else quieter:
/// the routing docs/operations.md describes.
const LOGGED: ServeSetup<'static> = ServeSetup { log_level: "warn,sluice::audit=info", stderr_to_file: true, env: &[] };

fn start(dir: &Path) -> Gateway {
    let ca = Authority::new(dir, "api-ca");
    let other_ca = Authority::new(dir, "other-ca");
    let server_files = ca.server(dir, "gateway");
    let (admin, monitor, stranger) = (ca.client(dir, "admin"), ca.client(dir, "monitor"), ca.client(dir, "stranger"));
    let impostor = other_ca.client(dir, "admin");
    let network = format!(
        "\n[management.network]\nlisten = \"127.0.0.1:0\"\ncertificate = \"{}\"\nprivate_key = \"{}\"\nclient_ca = \"{}\"\n\n\
         [[management.network.client]]\ncommon_name = \"admin\"\naccess = \"read-write\"\n\n\
         [[management.network.client]]\ncommon_name = \"monitor\"\naccess = \"read-only\"\n",
        server_files.certificate.display(),
        server_files.private_key.display(),
        ca.certificate_file.display()
    );
    let server = ManagedServer::start_with_config(dir, &LOGGED, |port| managed_config(port) + &network);
    let printed = server.printed("sluice: management API at https://").expect("the API's address is printed");
    let address = printed.trim_end_matches(" (mutual TLS)").parse().expect("an address");
    Gateway { server, address, ca, admin, monitor, stranger, impostor, other_ca }
}

impl Gateway {
    /// `sluice ARGS --api https://ADDRESS` with `client`'s certificate, trusting `ca`.
    fn sluice_as(&self, client: &Issued, ca: &Path, args: &[&str]) -> Output {
        Command::new(SLUICE)
            .args(args)
            .arg("--api")
            .arg(format!("https://{}", self.address))
            .arg("--api-ca")
            .arg(ca)
            .arg("--api-cert")
            .arg(&client.certificate)
            .arg("--api-key")
            .arg(&client.private_key)
            .env_remove("SLUICE_RPC_SOCKET")
            .stdin(Stdio::null())
            .output()
            .expect("run sluice")
    }

    fn sluice(&self, client: &Issued, args: &[&str]) -> Output {
        self.sluice_as(client, &self.ca.certificate_file, args)
    }

    fn namespaces(&self) -> Vec<u64> {
        let output = self.sluice(&self.admin, &["ns", "list", BASE, "-o", "json"]);
        assert!(output.status.success(), "ns list: {}", String::from_utf8_lossy(&output.stderr));
        let list: Value = serde_json::from_slice(&output.stdout).expect("JSON");
        list["namespaces"]
            .as_array()
            .expect("namespaces")
            .iter()
            .map(|namespace| namespace["nsid"].as_u64().unwrap())
            .collect()
    }

    fn file(&self) -> Vec<u8> {
        std::fs::read(self.server.config()).expect("read config")
    }

    /// The audit lines logged so far (bounded wait for `expected` of them).
    fn audit_lines(&self, expected: usize) -> Vec<String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let lines: Vec<String> =
                self.server.log().lines().filter(|line| line.contains("sluice::audit")).map(str::to_string).collect();
            if lines.len() >= expected || Instant::now() > deadline {
                return lines;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// A raw ns_add over TLS, with `client`'s certificate or none; the response line if
/// one came.
fn raw_ns_add(address: SocketAddr, ca: &Path, client: Option<&Issued>) -> Option<String> {
    let mut builder = SslConnector::builder(SslMethod::tls_client()).unwrap();
    builder.set_ca_file(ca).unwrap();
    builder.set_verify(SslVerifyMode::PEER);
    if let Some(client) = client {
        builder.set_certificate_file(&client.certificate, SslFiletype::PEM).unwrap();
        builder.set_private_key_file(&client.private_key, SslFiletype::PEM).unwrap();
    }
    let stream = TcpStream::connect(address).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut tls = builder.build().connect("127.0.0.1", stream).ok()?;
    let request = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ns_add\",\"params\":{{\"nqn\":\"{BASE}\",\"backend\":\"ram\",\"size\":\"4MiB\"}}}}\n"
    );
    tls.write_all(request.as_bytes()).ok()?;
    let mut response = String::new();
    BufReader::new(tls).read_line(&mut response).ok()?;
    (!response.is_empty()).then_some(response)
}

#[test]
fn an_admin_changes_a_read_only_client_reads_and_changes_are_audited() {
    let dir = scratch_dir("api-net-admin");
    let gateway = start(&dir);

    // (a) The admin adds a namespace and lists it, over TLS through the CLI.
    let output = gateway.sluice(&gateway.admin, &["ns", "add", BASE, "--backend", "ram", "--size", "8MiB"]);
    assert!(output.status.success(), "ns add: {}", stderr(&output));
    assert!(String::from_utf8_lossy(&output.stdout).contains("added namespace 2"), "{output:?}");
    assert_eq!(gateway.namespaces(), [1, 2]);

    // (d) The read-only client lists, but ns_add is refused with ACCESS_DENIED.
    let before = gateway.file();
    let output = gateway.sluice(&gateway.monitor, &["ns", "list", BASE]);
    assert!(output.status.success(), "read-only ns list: {}", stderr(&output));
    let output =
        gateway.sluice(&gateway.monitor, &["ns", "add", BASE, "--backend", "ram", "--size", "8MiB", "-o", "json"]);
    assert_eq!(output.status.code(), Some(2), "refused: {}", stderr(&output));
    let error: Value = serde_json::from_slice(&output.stdout).expect("the error as JSON");
    assert_eq!(error["error"]["code"], ACCESS_DENIED, "{error}");
    let message = stderr(&output);
    for part in ["client \"monitor\"", "read-only", "ns_add", "access = \"read-write\""] {
        assert!(message.contains(part), "{part}: {message}");
    }
    assert_eq!(gateway.file(), before, "a refused change leaves the file as it was");
    assert_eq!(gateway.namespaces(), [1, 2]);

    // (f) host_allow with a DH-HMAC-CHAP secret: audited, the secret never logged.
    let secret = nvme_host::Secret::from_key(&[7; 32], None).unwrap().to_representation().to_string();
    let key_part = secret.split(':').nth(2).expect("DHHC-1:00:KEY:").to_string();
    let output = gateway.sluice(
        &gateway.admin,
        &["host", "allow", BASE, "nqn.2014-08.org.nvmexpress:uuid:audited-host", "--dhchap-secret", &secret],
    );
    assert!(output.status.success(), "host allow: {}", stderr(&output));

    let lines = gateway.audit_lines(3);
    assert_eq!(lines.len(), 3, "one audit line per change request (ns_add, refused ns_add, host_allow): {lines:#?}");
    assert!(lines[0].contains("who=client \"admin\" from 127.0.0.1:") && lines[0].contains("ns_add"), "{}", lines[0]);
    assert!(lines[0].contains("outcome=") && lines[0].contains("ok"), "{}", lines[0]);
    assert!(
        lines[1].contains("client \"monitor\"") && lines[1].contains(&format!("code={ACCESS_DENIED}")),
        "{}",
        lines[1]
    );
    assert!(
        lines[2].contains("host_allow") && lines[2].contains("audited-host") && lines[2].contains("<redacted>"),
        "{}",
        lines[2]
    );
    let log = gateway.server.log();
    assert!(!log.contains(&key_part), "the DH-HMAC-CHAP secret reached the log:\n{log}");
    // Reads are not audited.
    assert!(!lines.iter().any(|line| line.contains("ns_list")), "{lines:#?}");
}

#[test]
fn callers_without_an_accepted_certificate_are_refused_and_change_nothing() {
    let dir = scratch_dir("api-net-refused");
    let gateway = start(&dir);
    let before = gateway.file();

    // (b) No certificate: the handshake fails and no request is answered.
    assert_eq!(
        raw_ns_add(gateway.address, &gateway.ca.certificate_file, None),
        None,
        "answered a client without a certificate"
    );

    // (c) A certificate of another CA, with a listed CN: refused in the handshake.
    assert_eq!(raw_ns_add(gateway.address, &gateway.ca.certificate_file, Some(&gateway.impostor)), None);
    let output = gateway.sluice(&gateway.impostor, &["ns", "add", BASE, "--backend", "ram", "--size", "8MiB"]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert!(stderr(&output).contains("refused our certificate"), "{}", stderr(&output));

    // (e) Signed by the CA but not listed: told so, nothing run.
    let response =
        raw_ns_add(gateway.address, &gateway.ca.certificate_file, Some(&gateway.stranger)).expect("an answer");
    let response: Value = serde_json::from_str(&response).expect("JSON");
    assert_eq!(response["error"]["code"], ACCESS_DENIED, "{response}");
    let output = gateway.sluice(&gateway.stranger, &["ns", "list", BASE]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("client \"stranger\"") && stderr(&output).contains("not listed"),
        "{}",
        stderr(&output)
    );

    // Our side refuses a server whose certificate our CA did not sign.
    let output = gateway.sluice_as(&gateway.admin, &gateway.other_ca.certificate_file, &["ns", "list", BASE]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("certificate is not trusted") && stderr(&output).contains("--api-ca"),
        "{}",
        stderr(&output)
    );

    // Missing client files are named before anything is sent.
    let output = Command::new(SLUICE)
        .args(["ns", "list", BASE, "--api", &format!("https://{}", gateway.address)])
        .env_remove("SLUICE_RPC_SOCKET")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("--api needs --api-ca FILE"), "{}", stderr(&output));

    assert_eq!(gateway.file(), before, "the config file is unchanged");
    assert_eq!(gateway.namespaces(), [1], "no namespace was added");
    let log = gateway.server.log();
    assert!(log.contains("not listed in [[management.network.client]]"), "the unlisted client is logged:\n{log}");

    // `sluice config check` reads the certificates and shows the endpoint.
    let output = Command::new(SLUICE).args(["config", "check"]).arg(gateway.server.config()).output().unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let shown = String::from_utf8_lossy(&output.stdout);
    assert!(
        shown.contains("management API on 127.0.0.1:0 (mutual TLS): 2 client(s), 1 read-write, 1 read-only"),
        "{shown}"
    );
}

#[test]
fn at_most_max_network_clients_connections_are_held() {
    let dir = scratch_dir("api-net-bounded");
    let gateway = start(&dir);
    // Connections that never shake hands hold their places until the handshake
    // timeout; the next one is closed at once.
    let held: Vec<TcpStream> =
        (0..MAX_NETWORK_CLIENTS).map(|_| TcpStream::connect(gateway.address).expect("connect")).collect();
    // Let the server take them all before the one too many.
    std::thread::sleep(Duration::from_millis(500));
    let mut extra = TcpStream::connect(gateway.address).expect("connect");
    extra.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut byte = [0u8; 1];
    // Closed: end of stream (or a reset); a timeout means the server kept it open.
    let closed = match extra.read(&mut byte) {
        Ok(0) => true,
        Ok(_) => false,
        Err(error) => error.kind() == std::io::ErrorKind::ConnectionReset,
    };
    assert!(closed, "a connection beyond {MAX_NETWORK_CLIENTS} was kept");
    // Once they go, clients are served again.
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let output = gateway.sluice(&gateway.admin, &["ns", "list", BASE]);
        if output.status.success() {
            break;
        }
        assert!(Instant::now() < deadline, "not served after the held connections closed: {}", stderr(&output));
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The TLS handshake has one deadline, not a timeout per read: a peer that sends a
/// byte every 2 s (each read well inside 10 s) is still closed about 10 s after it
/// connected, so a few such peers cannot hold the `MAX_NETWORK_CLIENTS` places.
#[test]
fn a_handshake_that_trickles_is_closed_at_its_deadline() {
    let dir = scratch_dir("api-net-trickle");
    let gateway = start(&dir);
    let mut stream = TcpStream::connect(gateway.address).expect("connect");
    let started = Instant::now();
    // The start of a TLS record header (handshake, TLS 1.0 record version), one
    // byte at a time: the server waits for the rest.
    let hello = [0x16u8, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03];
    let mut closed_after = None;
    for byte in hello.iter().cycle().take(20) {
        if stream.write_all(&[*byte]).is_err() {
            closed_after = Some(started.elapsed());
            break;
        }
        stream.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut answer = [0u8; 64];
        match stream.read(&mut answer) {
            // Closed (or an alert, then closed).
            Ok(_) => {
                closed_after = Some(started.elapsed());
                break;
            }
            Err(error) if matches!(error.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => {
                closed_after = Some(started.elapsed());
                break;
            }
        }
    }
    let closed_after = closed_after.expect("the trickling handshake was never closed (40 s)");
    assert!(
        closed_after >= Duration::from_secs(9) && closed_after < Duration::from_secs(16),
        "closed after {closed_after:?}, expected about the 10 s handshake deadline"
    );
}
