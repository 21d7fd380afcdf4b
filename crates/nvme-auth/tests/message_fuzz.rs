//! Hostile input: decoding never panics, whatever the bytes; the controller state
//! machine never panics whatever it is sent; what decodes re-encodes to a message
//! that decodes the same.

use nvme_auth::message::Message;
use nvme_auth::{ControllerAuthentication, ControllerCredentials, ControllerPolicy, Secret, SeededRandom};
use proptest::prelude::*;

/// Bytes that look like messages: a valid AUTH-TYPE/AUTH-ID pair most of the time,
/// so the fuzzing reaches the length checks behind the header.
fn message_like() -> impl Strategy<Value = Vec<u8>> {
    let headers = prop::sample::select(vec![(0u8, 0u8), (1, 1), (1, 2), (1, 3), (1, 4), (0, 0xF0), (0, 0xF1), (7, 7)]);
    (headers, prop::collection::vec(any::<u8>(), 0..1400)).prop_map(|((kind, id), mut body)| {
        if body.len() >= 2 {
            body[0] = kind;
            body[1] = id;
        }
        body
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn decode_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..5000)) {
        let _ = Message::decode(&bytes);
    }

    #[test]
    fn decoded_messages_round_trip(bytes in message_like()) {
        if let Ok(message) = Message::decode(&bytes) {
            let again = Message::decode(&message.to_bytes());
            prop_assert_eq!(again, Ok(message));
        }
    }

    #[test]
    fn the_controller_survives_any_sequence(
        sends in prop::collection::vec((message_like(), any::<bool>(), 0usize..5000), 1..8)
    ) {
        let secret = Secret::from_key(&[9; 32], None).unwrap();
        let mut controller = ControllerAuthentication::new(
            ControllerCredentials::new("nqn.host", "nqn.sub", &secret, Some(&secret)),
            ControllerPolicy::default(),
            Box::new(SeededRandom::new(1)),
        );
        for (payload, receive, allocation_length) in sends {
            let _ = controller.on_send(&payload);
            if receive {
                if let Ok((message, _)) = controller.on_receive(allocation_length) {
                    prop_assert!(message.len() <= allocation_length);
                    prop_assert!(Message::decode(&message).is_ok());
                }
            }
        }
    }
}
