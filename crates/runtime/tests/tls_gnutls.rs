//! The TLS server session against GnuTLS's client (`gnutls-cli`, from the library
//! Linux's `tlshd` handshakes with): a TLS 1.3 PSK handshake over a real loopback
//! socket, data both ways, and a wrong key refused. Skipped, loudly, when gnutls-cli is
//! not installed (scripts/setup.sh installs gnutls-bin).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use runtime::tls::{CipherSuite, Progress, PskChoice, PskLookup, TlsServer, TlsSession};
use zeroize::Zeroizing;

const IDENTITY: &str = "NVMe0R01 nqn.2014-08.org.nvmexpress:uuid:gnutls nqn.2026-11.io.sluice:tls";
const KEY_BYTE: u8 = 0x5A;
/// Bounds every wait: the handshake and one exchange take milliseconds.
const DEADLINE: Duration = Duration::from_secs(20);

fn gnutls_cli(port: u16, key_hex: &str) -> Option<Child> {
    let spawned = Command::new("gnutls-cli")
        .args([
            "--port",
            &port.to_string(),
            "--pskusername",
            IDENTITY,
            "--pskkey",
            key_hex,
            "--priority",
            "NORMAL:-VERS-ALL:+VERS-TLS1.3:-KX-ALL:+PSK:+DHE-PSK:+ECDHE-PSK",
            "127.0.0.1",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    match spawned {
        Ok(child) => Some(child),
        Err(error) => {
            eprintln!("SKIPPED: gnutls-cli is not installed ({error}); scripts/setup.sh installs gnutls-bin");
            None
        }
    }
}

fn server_session() -> TlsSession {
    let lookup: PskLookup = Arc::new(|identity: &[u8]| {
        (identity == IDENTITY.as_bytes())
            .then(|| PskChoice { key: Zeroizing::new(vec![KEY_BYTE; 32]), suite: CipherSuite::Aes128GcmSha256 })
    });
    TlsServer::new().expect("server").session(lookup).expect("session")
}

/// Moves ciphertext between `socket` and `session` until `done` says stop or the
/// deadline passes; errors from the session end it.
fn drive(
    socket: &mut TcpStream,
    session: &mut TlsSession,
    mut done: impl FnMut(&mut TlsSession) -> bool,
) -> Result<(), String> {
    let started = Instant::now();
    let mut buffer = vec![0u8; 16 * 1024];
    while started.elapsed() < DEADLINE {
        let mut out = Vec::new();
        session.take_ciphertext(&mut out);
        if !out.is_empty() {
            socket.write_all(&out).map_err(|error| error.to_string())?;
        }
        if done(session) {
            return Ok(());
        }
        match socket.read(&mut buffer) {
            Ok(0) => return Err("peer closed the socket".to_owned()),
            Ok(count) => session.receive_ciphertext(&buffer[..count]).map_err(|error| error.to_string())?,
            Err(error)
                if error.kind() == std::io::ErrorKind::WouldBlock || error.kind() == std::io::ErrorKind::TimedOut => {}
            Err(error) => return Err(error.to_string()),
        }
        session.advance().map_err(|error| error.to_string())?;
    }
    Err("deadline passed".to_owned())
}

#[test]
fn gnutls_client_handshakes_and_exchanges_data() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("address").port();
    let key_hex = format!("{KEY_BYTE:02x}").repeat(32);
    let Some(mut client) = gnutls_cli(port, &key_hex) else { return };
    let (mut socket, _) = listener.accept().expect("accept");
    socket.set_read_timeout(Some(Duration::from_millis(50))).expect("timeout");
    let mut session = server_session();

    let handshake = drive(&mut socket, &mut session, |session| matches!(session.advance(), Ok(Progress::Established)));
    if let Err(error) = handshake {
        let _ = client.kill();
        let output = client.wait_with_output().expect("output");
        panic!("handshake: {error}; gnutls-cli said: {}", String::from_utf8_lossy(&output.stderr));
    }
    assert_eq!(session.psk_identity().as_deref(), Some(IDENTITY.as_bytes()));
    assert_eq!(session.cipher_name(), Some("TLS_AES_128_GCM_SHA256"));

    // Client to server: gnutls-cli sends its stdin.
    client.stdin.as_mut().expect("stdin").write_all(b"hello from gnutls\n").expect("write");
    let mut received = Vec::new();
    let mut plain = [0u8; 256];
    drive(&mut socket, &mut session, |session| {
        while let Ok(count) = session.read_plaintext(&mut plain) {
            if count == 0 {
                break;
            }
            received.extend_from_slice(&plain[..count]);
        }
        received.ends_with(b"\n")
    })
    .expect("receive");
    assert_eq!(received, b"hello from gnutls\n");

    // Server to client: gnutls-cli prints what it receives.
    session.write_plaintext(b"hello from sluice\n").expect("write");
    let mut out = Vec::new();
    session.take_ciphertext(&mut out);
    socket.write_all(&out).expect("send");
    drop(client.stdin.take());
    std::thread::sleep(Duration::from_millis(300));
    drop(socket);
    let _ = client.kill();
    let output = client.wait_with_output().expect("output");
    let printed = String::from_utf8_lossy(&output.stdout);
    assert!(printed.contains("hello from sluice"), "gnutls-cli printed: {printed}");
}

#[test]
fn gnutls_client_with_a_wrong_key_is_refused() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("address").port();
    let wrong = "a5".repeat(32);
    let Some(mut client) = gnutls_cli(port, &wrong) else { return };
    let (mut socket, _) = listener.accept().expect("accept");
    socket.set_read_timeout(Some(Duration::from_millis(50))).expect("timeout");
    let mut session = server_session();
    let outcome = drive(&mut socket, &mut session, |session| matches!(session.advance(), Ok(Progress::Established)));
    let _ = client.kill();
    let _ = client.wait();
    let error = outcome.expect_err("a wrong key completed the handshake");
    assert!(!error.contains("deadline"), "refusal took the whole deadline: {error}");
}
