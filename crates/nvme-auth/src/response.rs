//! The two responses of DH-HMAC-CHAP (NVMe Base 2.0, "DH-HMAC-CHAP Protocol
//! Operations"), byte for byte as Linux computes them:
//!
//! ```text
//! R1 = HMAC(Kh, Ca || SEQNUM S1 (4, LE) || T_ID (2, LE) || SC_C (1) || "HostHost"
//!               || NQNh || 00h || NQNc)
//! R2 = HMAC(Kc, Cb || SEQNUM S2 (4, LE) || T_ID (2, LE) || SC_C (1) || "Controller"
//!               || NQNc || 00h || NQNh)
//! ```
//!
//! Kh is the host secret transformed with the host NQN, Kc the controller secret
//! transformed with the subsystem NQN. Without Diffie-Hellman, Ca = C1 and Cb = C2;
//! with it they are the augmented challenges HMAC(H(Ks), C) keyed by the hash of
//! the session key Ks. SC_C is AUTH_Negotiate's, as the host sent it (0 without
//! secure channel concatenation; Linux hosts put it there since 6.18, and Linux
//! targets check it so since 6.19).

use crate::hash::{DigestValue, HashFunction};

/// What one response is computed over.
pub(crate) struct ResponseInput<'a> {
    /// The negotiated hash.
    pub hash: HashFunction,
    /// The transformed secret (Kh or Kc).
    pub key: &'a [u8],
    /// C1 or C2.
    pub challenge: &'a [u8],
    /// S1 or S2.
    pub sequence_number: u32,
    /// T_ID.
    pub transaction_id: u16,
    /// Ks, when a DH group is in use.
    pub session_key: Option<&'a [u8]>,
    /// SC_C of the transaction's AUTH_Negotiate.
    pub secure_channel: u8,
}

/// The augmented challenge HMAC(H(Ks), C), or C itself without a session key.
fn effective_challenge(input: &ResponseInput<'_>) -> DigestValue {
    match input.session_key {
        Some(session_key) => {
            let hashed_key = input.hash.hash(session_key);
            input.hash.hmac(hashed_key.as_bytes(), &[input.challenge])
        }
        // C is HL bytes, at most a digest: carried the same way as the augmented one.
        None => DigestValue::copy_of(input.challenge),
    }
}

fn response(input: &ResponseInput<'_>, role: &[u8], first_nqn: &str, second_nqn: &str) -> DigestValue {
    let challenge = effective_challenge(input);
    input.hash.hmac(
        input.key,
        &[
            challenge.as_bytes(),
            &input.sequence_number.to_le_bytes(),
            &input.transaction_id.to_le_bytes(),
            &[input.secure_channel],
            role,
            first_nqn.as_bytes(),
            &[0],
            second_nqn.as_bytes(),
        ],
    )
}

/// R1: the host's response to C1.
pub(crate) fn host_response(input: &ResponseInput<'_>, host_nqn: &str, subsystem_nqn: &str) -> DigestValue {
    response(input, b"HostHost", host_nqn, subsystem_nqn)
}

/// R2: the controller's response to C2.
pub(crate) fn controller_response(input: &ResponseInput<'_>, subsystem_nqn: &str, host_nqn: &str) -> DigestValue {
    response(input, b"Controller", subsystem_nqn, host_nqn)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The response computed the long way: one buffer with every field.
    fn reference(input: &ResponseInput<'_>, role: &[u8], first: &str, second: &str) -> Vec<u8> {
        let challenge: Vec<u8> = match input.session_key {
            Some(key) => input.hash.hmac(input.hash.hash(key).as_bytes(), &[input.challenge]).as_bytes().to_vec(),
            None => input.challenge.to_vec(),
        };
        let mut data = challenge;
        data.extend_from_slice(&input.sequence_number.to_le_bytes());
        data.extend_from_slice(&input.transaction_id.to_le_bytes());
        data.push(input.secure_channel);
        data.extend_from_slice(role);
        data.extend_from_slice(first.as_bytes());
        data.push(0);
        data.extend_from_slice(second.as_bytes());
        input.hash.hmac(input.key, &[&data]).as_bytes().to_vec()
    }

    #[test]
    fn responses_cover_every_field_in_order() {
        for hash in HashFunction::ALL {
            let challenge = vec![0x5A; hash.length()];
            for session_key in [None, Some(&[7u8; 256][..])] {
                let input = ResponseInput {
                    hash,
                    key: &[1; 32],
                    challenge: &challenge,
                    sequence_number: 0x0102_0304,
                    transaction_id: 0x0506,
                    session_key,
                    secure_channel: if session_key.is_some() { 2 } else { 0 },
                };
                let host = host_response(&input, "nqn.host", "nqn.sub");
                assert_eq!(host.as_bytes(), &reference(&input, b"HostHost", "nqn.host", "nqn.sub")[..]);
                let controller = controller_response(&input, "nqn.sub", "nqn.host");
                assert_eq!(controller.as_bytes(), &reference(&input, b"Controller", "nqn.sub", "nqn.host")[..]);
                assert_ne!(host.as_bytes(), controller.as_bytes());
                // Swapping the NQNs changes the response: the 00h separator matters.
                assert_ne!(host.as_bytes(), host_response(&input, "nqn.sub", "nqn.host").as_bytes());
            }
        }
    }
}
