use super::*;

const IDENTITY: &[u8] = b"NVMe0R01 nqn.2014-08.org.nvmexpress:uuid:host nqn.2026-11.io.sluice:tls";

fn key(byte: u8, suite: CipherSuite) -> PskChoice {
    let length = if suite == CipherSuite::Aes256GcmSha384 { 48 } else { 32 };
    PskChoice { key: Zeroizing::new(vec![byte; length]), suite }
}

/// A server that knows IDENTITY with key byte 7 for `suite`.
fn server_session(suite: CipherSuite) -> TlsSession {
    let lookup: PskLookup = Arc::new(move |identity: &[u8]| (identity == IDENTITY).then(|| key(7, suite)));
    TlsServer::new().expect("server").session(lookup).expect("session")
}

/// Moves bytes both ways until neither side has anything to send; the outcome of
/// each side's last `advance`.
fn shake(client: &mut TlsSession, server: &mut TlsSession) -> (Result<Progress, String>, Result<Progress, String>) {
    let mut client_progress = client.advance().map_err(|error| error.to_string());
    let mut server_progress = Ok(Progress::Handshaking);
    for _ in 0..10 {
        let mut bytes = Vec::new();
        client.take_ciphertext(&mut bytes);
        if !bytes.is_empty() {
            server.receive_ciphertext(&bytes).expect("room");
        }
        server_progress = server.advance().map_err(|error| error.to_string());
        let mut back = Vec::new();
        server.take_ciphertext(&mut back);
        if !back.is_empty() {
            client.receive_ciphertext(&back).expect("room");
        }
        client_progress = client.advance().map_err(|error| error.to_string());
        if bytes.is_empty() && back.is_empty() {
            break;
        }
    }
    (client_progress, server_progress)
}

fn pump(from: &mut TlsSession, to: &mut TlsSession) {
    let mut bytes = Vec::new();
    from.take_ciphertext(&mut bytes);
    to.receive_ciphertext(&bytes).expect("room");
}

#[test]
fn both_suites_handshake_and_carry_data_both_ways() {
    for (suite, name) in [
        (CipherSuite::Aes128GcmSha256, "TLS_AES_128_GCM_SHA256"),
        (CipherSuite::Aes256GcmSha384, "TLS_AES_256_GCM_SHA384"),
    ] {
        let mut server = server_session(suite);
        let mut client = TlsClient::new().expect("client").session(IDENTITY, key(7, suite)).expect("session");
        let (client_progress, server_progress) = shake(&mut client, &mut server);
        assert_eq!(client_progress, Ok(Progress::Established), "{name}");
        assert_eq!(server_progress, Ok(Progress::Established), "{name}");
        assert_eq!(server.cipher_name(), Some(name));
        assert_eq!(server.psk_identity().as_deref(), Some(IDENTITY));

        // 100 KiB host to controller: several records.
        let data: Vec<u8> = (0..100 * 1024).map(|index| (index % 251) as u8).collect();
        client.write_plaintext(&data).expect("write");
        let mut ciphertext = Vec::new();
        client.take_ciphertext(&mut ciphertext);
        assert!(ciphertext.windows(64).all(|window| window != &data[..64]), "plaintext visible on the wire");
        let mut received = Vec::new();
        let mut buffer = vec![0u8; 8192];
        for chunk in ciphertext.chunks(MAX_TLS_BUFFERED_CIPHERTEXT_BYTES / 2) {
            server.receive_ciphertext(chunk).expect("room");
            loop {
                let count = server.read_plaintext(&mut buffer).expect("read");
                if count == 0 {
                    break;
                }
                received.extend_from_slice(&buffer[..count]);
            }
        }
        assert_eq!(received, data);

        server.write_plaintext(b"response").expect("write");
        pump(&mut server, &mut client);
        let count = client.read_plaintext(&mut buffer).expect("read");
        assert_eq!(&buffer[..count], b"response");
    }
}

#[test]
fn a_wrong_key_fails_the_handshake() {
    let mut server = server_session(CipherSuite::Aes128GcmSha256);
    let mut client =
        TlsClient::new().expect("client").session(IDENTITY, key(8, CipherSuite::Aes128GcmSha256)).expect("session");
    let (client_progress, server_progress) = shake(&mut client, &mut server);
    assert!(server_progress.is_err(), "server accepted a wrong key: {server_progress:?}");
    assert!(client_progress.is_err() || client_progress == Ok(Progress::Handshaking), "{client_progress:?}");
    assert_eq!(server.psk_identity(), None, "no identity before a completed handshake");
}

#[test]
fn an_unknown_identity_is_refused_and_named() {
    let mut server = server_session(CipherSuite::Aes128GcmSha256);
    let mut client = TlsClient::new()
        .expect("client")
        .session(b"NVMe0R01 nqn.other nqn.2026-11.io.sluice:tls", key(7, CipherSuite::Aes128GcmSha256))
        .expect("session");
    let (_, server_progress) = shake(&mut client, &mut server);
    let message = server_progress.expect_err("unknown identity accepted");
    assert!(message.contains("nqn.other"), "{message}");
}

#[test]
fn a_suite_mismatch_fails() {
    // The server holds a SHA-256 key for the identity; the client offers SHA-384.
    let mut server = server_session(CipherSuite::Aes128GcmSha256);
    let mut client =
        TlsClient::new().expect("client").session(IDENTITY, key(7, CipherSuite::Aes256GcmSha384)).expect("session");
    let (_, server_progress) = shake(&mut client, &mut server);
    assert!(server_progress.is_err(), "{server_progress:?}");
}

#[test]
fn garbage_and_floods_fail_without_panicking() {
    let mut server = server_session(CipherSuite::Aes128GcmSha256);
    // An NVMe/TCP ICReq in clear instead of a ClientHello.
    let mut icreq = vec![0u8; 128];
    icreq[1] = 128;
    server.receive_ciphertext(&icreq).expect("room");
    assert!(server.advance().is_err());

    let mut server = server_session(CipherSuite::Aes128GcmSha256);
    let flood = vec![0x16u8; MAX_TLS_BUFFERED_CIPHERTEXT_BYTES + 1];
    assert!(matches!(server.receive_ciphertext(&flood), Err(TlsError::Overrun)));
}

#[test]
fn offered_identities_parse_and_malformed_extensions_do_not_panic() {
    // Identities ("ab", "xyz") with ticket ages, then a binders list; first with a
    // list length that covers only "ab".
    let extension = [0, 8, 0, 2, b'a', b'b', 0, 0, 0, 0, 0, 3, b'x', b'y', b'z', 0, 0, 0, 0, 0, 33, 32];
    assert_eq!(psk::parse_offered_identities(&extension), vec![&b"ab"[..]]);
    let extension = [0, 17, 0, 2, b'a', b'b', 0, 0, 0, 0, 0, 3, b'x', b'y', b'z', 0, 0, 0, 0, 0, 33, 32];
    assert_eq!(psk::parse_offered_identities(&extension), vec![&b"ab"[..], &b"xyz"[..]]);
    for length in 0..extension.len() {
        let _ = psk::parse_offered_identities(&extension[..length]);
    }
    assert!(psk::parse_offered_identities(&[0xFF, 0xFF, 0, 200, 1]).is_empty());
}

/// An inner handler that records what reaches it.
#[derive(Default)]
struct Recorder {
    received: Vec<u8>,
}

struct NoBatch;

impl crate::SendSource for NoBatch {
    fn parts<'a>(&'a self, _out: &mut crate::SendParts<'a>) {}
    fn total_len(&self) -> usize {
        0
    }
}

impl crate::ConnectionHandler for Recorder {
    type Batch = NoBatch;
    fn on_receive(&mut self, data: &[u8], _now: std::time::Instant) {
        self.received.extend_from_slice(data);
    }
    fn take_send(&mut self) -> Option<NoBatch> {
        None
    }
    fn on_sent(&mut self, _batch: NoBatch, _now: std::time::Instant) {}
    fn on_timer(&mut self, _now: std::time::Instant) {}
    fn next_deadline(&self) -> Option<std::time::Instant> {
        None
    }
    fn wants_close(&self) -> bool {
        false
    }
    fn on_closed(&mut self, _reason: crate::CloseReason) {}
}

#[test]
fn an_established_connection_names_why_tls_failed() {
    use crate::ConnectionHandler;
    let suite = CipherSuite::Aes128GcmSha256;
    let mut server = server_session(suite);
    let mut client = TlsClient::new().expect("client").session(IDENTITY, key(7, suite)).expect("session");
    let (client_progress, _) = shake(&mut client, &mut server);
    assert_eq!(client_progress, Ok(Progress::Established));
    let now = std::time::Instant::now();
    let mut connection = TlsConnection::established(Recorder::default(), Box::new(client), "peer".into(), now);

    // A record from the server arrives as plaintext for the inner handler.
    server.write_plaintext(b"capsule").expect("write");
    let mut record = Vec::new();
    server.take_ciphertext(&mut record);
    connection.on_receive(&record, now);
    assert_eq!(connection.inner().received, b"capsule");
    assert_eq!(connection.failure(), None);

    // A forged record (a flipped bit in its ciphertext) fails the session, and the
    // reason stays for whoever reports the close.
    server.write_plaintext(b"response").expect("write");
    let mut forged = Vec::new();
    server.take_ciphertext(&mut forged);
    let last = forged.len() - 1;
    forged[last] ^= 1;
    connection.on_receive(&forged, now);
    assert!(connection.wants_close());
    assert!(connection.failure().is_some_and(|reason| !reason.is_empty()), "{:?}", connection.failure());
    assert_eq!(connection.inner().received, b"capsule");
}

#[test]
fn a_psk_picks_the_suite_of_its_hash_by_its_length() {
    let sha256 = PskChoice::for_key(Zeroizing::new(vec![1; 32]));
    assert_eq!(sha256.suite, CipherSuite::Aes128GcmSha256);
    let sha384 = PskChoice::for_key(Zeroizing::new(vec![1; 48]));
    assert_eq!(sha384.suite, CipherSuite::Aes256GcmSha384);
}
