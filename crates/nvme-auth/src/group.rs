//! Diffie-Hellman groups of DH-HMAC-CHAP (NVMe Base 2.0, "DH group identifiers"):
//! the null group (no Diffie-Hellman: the challenge is used as it is) and the RFC
//! 7919 finite field groups ffdhe2048 .. ffdhe8192, generator 2.
//!
//! Public values and the shared secret travel as big-endian numbers padded with
//! leading zeros to the size of the prime (what Linux sends and expects).
//!
//! The arithmetic is RustCrypto's `crypto-bigint` in Montgomery form, and both
//! exponentiations (the public value g^x and the shared secret y^x) are constant
//! time in the private exponent x: fixed 4-bit windows over all of x's bits (the
//! group's full exponent length, whatever x's leading zeros), a table lookup that
//! touches every entry, and numbers of a fixed width (the prime's) throughout, so
//! the running time and memory accesses depend only on the group. The peer's value
//! is public and is checked with ordinary comparisons. Every exchange also uses a
//! fresh private exponent that is never reused; it is kept as zeroed-on-drop bytes
//! between uses, and the shared secret is zeroed on drop.

use std::sync::OnceLock;

use crypto_bigint::modular::{BoxedMontyForm, BoxedMontyParams};
use crypto_bigint::{BoxedUint, Odd};
use zeroize::Zeroizing;

use crate::primes;
use crate::random::{RandomError, RandomSource};

/// Largest public value of any group (ffdhe8192: 1024 bytes); bounds DHVLEN.
pub const MAX_PUBLIC_VALUE_BYTES: usize = 1024;

/// A DH-HMAC-CHAP Diffie-Hellman group, by its DH group identifier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DhGroup {
    /// 00h: no Diffie-Hellman exchange.
    Null,
    /// 01h: ffdhe2048.
    Ffdhe2048,
    /// 02h: ffdhe3072.
    Ffdhe3072,
    /// 03h: ffdhe4096.
    Ffdhe4096,
    /// 04h: ffdhe6144.
    Ffdhe6144,
    /// 05h: ffdhe8192.
    Ffdhe8192,
}

/// Why a peer's Diffie-Hellman value was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DhError {
    /// DHVLEN differs from the size of the group's prime.
    #[error("Diffie-Hellman value of {actual} bytes; the group needs {expected}")]
    Length {
        /// Bytes received.
        actual: usize,
        /// Bytes the group uses.
        expected: usize,
    },
    /// The value is 0, 1, p - 1 or not below p: it would force a predictable
    /// shared secret (small subgroup).
    #[error("Diffie-Hellman value outside 2..=p-2")]
    OutOfRange,
    /// The null group has no Diffie-Hellman values.
    #[error("the null DH group has no Diffie-Hellman values")]
    NullGroup,
}

impl DhGroup {
    /// Every group, in identifier order.
    pub const ALL: [DhGroup; 6] = [
        DhGroup::Null,
        DhGroup::Ffdhe2048,
        DhGroup::Ffdhe3072,
        DhGroup::Ffdhe4096,
        DhGroup::Ffdhe6144,
        DhGroup::Ffdhe8192,
    ];

    /// DH group identifier as carried in messages.
    pub const fn id(self) -> u8 {
        match self {
            DhGroup::Null => 0x00,
            DhGroup::Ffdhe2048 => 0x01,
            DhGroup::Ffdhe3072 => 0x02,
            DhGroup::Ffdhe4096 => 0x03,
            DhGroup::Ffdhe6144 => 0x04,
            DhGroup::Ffdhe8192 => 0x05,
        }
    }

    /// The group with this identifier; `None` for reserved values.
    pub const fn from_id(id: u8) -> Option<Self> {
        match id {
            0x00 => Some(DhGroup::Null),
            0x01 => Some(DhGroup::Ffdhe2048),
            0x02 => Some(DhGroup::Ffdhe3072),
            0x03 => Some(DhGroup::Ffdhe4096),
            0x04 => Some(DhGroup::Ffdhe6144),
            0x05 => Some(DhGroup::Ffdhe8192),
            _ => None,
        }
    }

    /// The name nvme-cli and Linux use ("null", "ffdhe2048"...).
    pub const fn name(self) -> &'static str {
        match self {
            DhGroup::Null => "null",
            DhGroup::Ffdhe2048 => "ffdhe2048",
            DhGroup::Ffdhe3072 => "ffdhe3072",
            DhGroup::Ffdhe4096 => "ffdhe4096",
            DhGroup::Ffdhe6144 => "ffdhe6144",
            DhGroup::Ffdhe8192 => "ffdhe8192",
        }
    }

    /// The group named `name` ("null", "ffdhe2048"...); `None` otherwise.
    pub fn from_name(name: &str) -> Option<Self> {
        DhGroup::ALL.into_iter().find(|group| group.name().eq_ignore_ascii_case(name))
    }

    /// Bytes of a public value (DHVLEN): the size of the prime; 0 for the null group.
    pub const fn value_bytes(self) -> usize {
        match self {
            DhGroup::Null => 0,
            DhGroup::Ffdhe2048 => 256,
            DhGroup::Ffdhe3072 => 384,
            DhGroup::Ffdhe4096 => 512,
            DhGroup::Ffdhe6144 => 768,
            DhGroup::Ffdhe8192 => 1024,
        }
    }

    /// Bits of the private exponent. RFC 7919 section 5.2 asks for at least twice
    /// the group's security strength (225, 275, 325, 375 and 400 bits); these round
    /// up to whole 64-bit words, and are far cheaper than full-size exponents.
    /// Every exponentiation processes exactly this many bits.
    const fn exponent_bits(self) -> u32 {
        match self {
            DhGroup::Null => 0,
            DhGroup::Ffdhe2048 => 256,
            DhGroup::Ffdhe3072 => 320,
            DhGroup::Ffdhe4096 => 384,
            DhGroup::Ffdhe6144 => 448,
            DhGroup::Ffdhe8192 => 512,
        }
    }

    /// Bits of the prime (and of every number of the group's arithmetic).
    const fn prime_bits(self) -> u32 {
        (self.value_bytes() * 8) as u32
    }

    /// The Montgomery parameters of the prime p (p itself is `.modulus()`); `None`
    /// for the null group.
    fn params(self) -> Option<&'static BoxedMontyParams> {
        static PARAMS: [OnceLock<BoxedMontyParams>; 5] =
            [OnceLock::new(), OnceLock::new(), OnceLock::new(), OnceLock::new(), OnceLock::new()];
        let (slot, hex) = match self {
            DhGroup::Null => return None,
            DhGroup::Ffdhe2048 => (0, primes::FFDHE2048_PRIME_HEX),
            DhGroup::Ffdhe3072 => (1, primes::FFDHE3072_PRIME_HEX),
            DhGroup::Ffdhe4096 => (2, primes::FFDHE4096_PRIME_HEX),
            DhGroup::Ffdhe6144 => (3, primes::FFDHE6144_PRIME_HEX),
            DhGroup::Ffdhe8192 => (4, primes::FFDHE8192_PRIME_HEX),
        };
        Some(PARAMS[slot].get_or_init(|| {
            let prime = BoxedUint::from_be_hex(hex, self.prime_bits())
                .into_option()
                .unwrap_or_else(|| unreachable!("the RFC 7919 primes are valid hex of their size"));
            let prime = Odd::new(prime).into_option().unwrap_or_else(|| unreachable!("the RFC 7919 primes are odd"));
            // p is public: the variable-time setup leaks nothing secret.
            BoxedMontyParams::new_vartime(prime)
        }))
    }

    /// base^x mod p, big-endian and padded to the prime's size, constant time in
    /// `exponent` (x, big-endian, `exponent_bits() / 8` bytes): every one of the
    /// group's exponent bits is processed, whatever x's value. `base` must be below
    /// p and have the prime's width; the caller checks.
    fn power(self, params: &BoxedMontyParams, base: BoxedUint, exponent: &[u8]) -> Zeroizing<Vec<u8>> {
        let exponent_bits = self.exponent_bits();
        debug_assert_eq!(exponent.len() * 8, exponent_bits as usize);
        let exponent = Zeroizing::new(
            BoxedUint::from_be_slice(exponent, exponent_bits)
                .unwrap_or_else(|_| unreachable!("a private exponent has the group's exponent size")),
        );
        debug_assert_eq!(exponent.bits_precision(), exponent_bits, "exponent sizes are whole limbs");
        let base = BoxedMontyForm::new(base, params);
        let result = Zeroizing::new(base.pow_bounded_exp(&exponent, exponent_bits));
        let value = Zeroizing::new(result.retrieve());
        fixed_width_bytes(&value, self.value_bytes())
    }
}

/// One side's ephemeral Diffie-Hellman key: a fresh private exponent and the public
/// value g^x mod p that goes on the wire.
pub struct EphemeralKey {
    group: DhGroup,
    /// x, big-endian; zeroed on drop.
    private: Zeroizing<Vec<u8>>,
    public: Vec<u8>,
}

impl std::fmt::Debug for EphemeralKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EphemeralKey").field("group", &self.group).finish_non_exhaustive()
    }
}

impl EphemeralKey {
    /// A new key for `group`; `Err(DhError::NullGroup)`-free: callers only ask for
    /// keys of real groups, so the null group yields an empty key.
    pub fn generate(group: DhGroup, random: &mut dyn RandomSource) -> Result<EphemeralKey, RandomError> {
        if group == DhGroup::Null {
            return Ok(EphemeralKey { group, private: Zeroizing::new(Vec::new()), public: Vec::new() });
        }
        let bytes = (group.exponent_bits() / 8) as usize;
        let mut private = Zeroizing::new(vec![0u8; bytes]);
        random.fill(&mut private)?;
        // Top bit set: the exponent has its full strength (and is far above 1).
        private[0] |= 0x80;
        Ok(EphemeralKey::from_private(group, private))
    }

    /// The key with private exponent `private` (big-endian, the group's exponent
    /// size): computes the public value 2^x mod p.
    fn from_private(group: DhGroup, private: Zeroizing<Vec<u8>>) -> EphemeralKey {
        let Some(params) = group.params() else {
            return EphemeralKey { group, private: Zeroizing::new(Vec::new()), public: Vec::new() };
        };
        let generator = BoxedUint::from_be_slice(&[2], group.prime_bits())
            .unwrap_or_else(|_| unreachable!("2 fits every group's width"));
        let public = group.power(params, generator, &private).to_vec();
        EphemeralKey { group, private, public }
    }

    /// The public value g^x mod p, padded to the prime's size.
    pub fn public_value(&self) -> &[u8] {
        &self.public
    }

    /// The group.
    pub fn group(&self) -> DhGroup {
        self.group
    }

    /// The shared secret (the session key Ks) with the peer's public value: peer^x
    /// mod p, padded to the prime's size. The peer's value is checked first.
    pub fn shared_secret(&self, peer_public: &[u8]) -> Result<Zeroizing<Vec<u8>>, DhError> {
        let params = self.group.params().ok_or(DhError::NullGroup)?;
        let expected = self.group.value_bytes();
        if peer_public.len() != expected {
            return Err(DhError::Length { actual: peer_public.len(), expected });
        }
        let bits = self.group.prime_bits();
        let peer = BoxedUint::from_be_slice(peer_public, bits)
            .unwrap_or_else(|_| unreachable!("a value of the prime's size fits the prime's width"));
        let one = BoxedUint::one_with_precision(bits);
        let p_minus_one = params.modulus().as_ref().wrapping_sub(&one);
        if peer <= one || peer >= p_minus_one {
            return Err(DhError::OutOfRange);
        }
        Ok(self.group.power(params, peer, &self.private))
    }
}

/// `value` big-endian in exactly `length` bytes: leading zeros added, or (for a
/// width rounded up to whole limbs) zero bytes dropped. The number's width is fixed
/// by the group, so this takes the same steps for every value.
fn fixed_width_bytes(value: &BoxedUint, length: usize) -> Zeroizing<Vec<u8>> {
    let raw = Zeroizing::new(value.to_be_bytes());
    let mut out = Zeroizing::new(vec![0u8; length]);
    if raw.len() >= length {
        let (extra, tail) = raw.split_at(raw.len() - length);
        debug_assert!(extra.iter().all(|&byte| byte == 0), "a value below p fits the size of p");
        out.copy_from_slice(tail);
    } else {
        out[length - raw.len()..].copy_from_slice(&raw);
    }
    out
}

#[cfg(test)]
mod tests {
    use num_bigint::BigUint;

    use super::*;
    use crate::random::SeededRandom;

    impl DhGroup {
        /// p as the group's arithmetic uses it, as a `num-bigint` number (the oracle
        /// of these tests); `None` for the null group.
        fn prime(self) -> Option<&'static BigUint> {
            static PRIMES: [OnceLock<BigUint>; 5] =
                [OnceLock::new(), OnceLock::new(), OnceLock::new(), OnceLock::new(), OnceLock::new()];
            let params = self.params()?;
            let slot = usize::from(self.id()) - 1;
            Some(PRIMES[slot].get_or_init(|| BigUint::from_bytes_be(&params.modulus().as_ref().to_be_bytes())))
        }
    }

    /// `value` big-endian, with leading zeros to `length` bytes.
    fn padded(value: &BigUint, length: usize) -> Vec<u8> {
        let raw = value.to_bytes_be();
        assert!(raw.len() <= length);
        let mut out = vec![0u8; length - raw.len()];
        out.extend_from_slice(&raw);
        out
    }

    const REAL_GROUPS: [DhGroup; 5] =
        [DhGroup::Ffdhe2048, DhGroup::Ffdhe3072, DhGroup::Ffdhe4096, DhGroup::Ffdhe6144, DhGroup::Ffdhe8192];

    /// floor(2^bits * e), from the series e = sum 1/k!, with guard bits so the
    /// truncation of each term cannot reach the integer part.
    fn e_scaled(bits: u64) -> BigUint {
        let guard = 64;
        let one = BigUint::from(1u32) << (bits + guard);
        let mut term = one.clone();
        let mut sum = BigUint::from(0u32);
        let mut k = 1u32;
        while term > BigUint::from(0u32) {
            sum += &term;
            term /= k;
            k += 1;
        }
        sum >> guard
    }

    #[test]
    fn primes_follow_the_rfc_7919_construction() {
        // p = 2^b - 2^(b-64) + {[2^(b-130) e] + X} * 2^64 - 1, with X from RFC 7919
        // appendix A. Rebuilding the primes checks every hex digit embedded above.
        let cases = [
            (DhGroup::Ffdhe2048, 2048u64, 560_316u32),
            (DhGroup::Ffdhe3072, 3072, 2_625_351),
            (DhGroup::Ffdhe4096, 4096, 5_736_041),
            (DhGroup::Ffdhe6144, 6144, 15_705_020),
            (DhGroup::Ffdhe8192, 8192, 10_965_728),
        ];
        for (group, bits, x) in cases {
            let one = BigUint::from(1u32);
            let expected = (&one << bits) - (&one << (bits - 64)) + ((e_scaled(bits - 130) + x) << 64u32) - &one;
            assert_eq!(group.prime(), Some(&expected), "{}", group.name());
            assert_eq!(expected.bits(), bits);
            assert_eq!(group.value_bytes() as u64 * 8, bits);
        }
        assert_eq!(DhGroup::Null.prime(), None);
    }

    #[test]
    fn both_sides_derive_the_same_secret() {
        let mut random = SeededRandom::new(7);
        let a = EphemeralKey::generate(DhGroup::Ffdhe2048, &mut random).unwrap();
        let b = EphemeralKey::generate(DhGroup::Ffdhe2048, &mut random).unwrap();
        assert_eq!(a.public_value().len(), 256);
        let ab = a.shared_secret(b.public_value()).unwrap();
        let ba = b.shared_secret(a.public_value()).unwrap();
        assert_eq!(&ab[..], &ba[..]);
        assert_eq!(ab.len(), 256);
    }

    #[test]
    fn degenerate_peer_values_are_refused() {
        let mut random = SeededRandom::new(8);
        let key = EphemeralKey::generate(DhGroup::Ffdhe2048, &mut random).unwrap();
        let mut value = vec![0u8; 256];
        assert_eq!(key.shared_secret(&value), Err(DhError::OutOfRange));
        value[255] = 1;
        assert_eq!(key.shared_secret(&value), Err(DhError::OutOfRange));
        let p_minus_1 = padded(&(DhGroup::Ffdhe2048.prime().unwrap() - 1u32), 256);
        assert_eq!(key.shared_secret(&p_minus_1), Err(DhError::OutOfRange));
        assert_eq!(key.shared_secret(&[0xFF; 256]), Err(DhError::OutOfRange));
        assert_eq!(key.shared_secret(&[2; 255]), Err(DhError::Length { actual: 255, expected: 256 }));
        let null = EphemeralKey::generate(DhGroup::Null, &mut random).unwrap();
        assert_eq!(null.shared_secret(&[]), Err(DhError::NullGroup));
        for group in DhGroup::ALL {
            assert_eq!(DhGroup::from_id(group.id()), Some(group));
        }
        assert_eq!(DhGroup::from_id(6), None);
    }

    #[test]
    fn exponentiation_matches_num_bigint_modpow() {
        // A handful of random exponents and bases per group, with num-bigint's
        // modpow as the oracle. Some exponents have leading zero bytes (and one is
        // all zeros but the last bit): the fixed-length processing must not care.
        let mut random = SeededRandom::new(19);
        for group in REAL_GROUPS {
            let prime = group.prime().unwrap();
            let exponent_bytes = (group.exponent_bits() / 8) as usize;
            for case in 0..4 {
                let mut private = Zeroizing::new(vec![0u8; exponent_bytes]);
                random.fill(&mut private).unwrap();
                match case {
                    0 => private[0] |= 0x80,
                    1 => private[..3].fill(0),
                    2 => {
                        private.fill(0);
                        private[exponent_bytes - 1] = 1;
                    }
                    _ => private[0] &= 0x0F,
                }
                let exponent = BigUint::from_bytes_be(&private);
                let key = EphemeralKey::from_private(group, private.clone());
                let public = BigUint::from(2u32).modpow(&exponent, prime);
                assert_eq!(key.public_value(), padded(&public, group.value_bytes()), "{} case {case}", group.name());

                // A random base in 2..=p-2.
                let mut raw = vec![0u8; group.value_bytes()];
                random.fill(&mut raw).unwrap();
                let base = BigUint::from_bytes_be(&raw) % (prime - 3u32) + 2u32;
                let peer = padded(&base, group.value_bytes());
                let shared = key.shared_secret(&peer).unwrap();
                let expected = base.modpow(&exponent, prime);
                assert_eq!(&shared[..], padded(&expected, group.value_bytes()), "{} case {case}", group.name());
            }
        }
    }

    #[test]
    fn public_values_with_leading_zero_bytes_round_trip() {
        // Seed 44's first ffdhe2048 key has a public value whose top byte is zero
        // (about one key in 256 does): it is sent padded to 256 bytes, and the peer
        // takes it back as the same number.
        let mut random = SeededRandom::new(44);
        let a = EphemeralKey::generate(DhGroup::Ffdhe2048, &mut random).unwrap();
        let b = EphemeralKey::generate(DhGroup::Ffdhe2048, &mut random).unwrap();
        assert_eq!(a.public_value().len(), 256);
        assert_eq!(a.public_value()[0], 0, "seed 44 no longer gives a leading zero byte");
        let ab = a.shared_secret(b.public_value()).unwrap();
        let ba = b.shared_secret(a.public_value()).unwrap();
        assert_eq!(&ab[..], &ba[..]);
        let prime = DhGroup::Ffdhe2048.prime().unwrap();
        let a_public = BigUint::from_bytes_be(a.public_value());
        let expected = a_public.modpow(&BigUint::from_bytes_be(&b.private), prime);
        assert_eq!(&ba[..], padded(&expected, 256));

        // Extreme case in every group: x = 1 makes the public value 2, all leading
        // zeros but the last byte; the peer's secret from it is its own public value.
        for group in REAL_GROUPS {
            let mut one = Zeroizing::new(vec![0u8; (group.exponent_bits() / 8) as usize]);
            *one.last_mut().unwrap() = 1;
            let small = EphemeralKey::from_private(group, one);
            let mut two = vec![0u8; group.value_bytes()];
            *two.last_mut().unwrap() = 2;
            assert_eq!(small.public_value(), two);
            let peer = EphemeralKey::generate(group, &mut random).unwrap();
            assert_eq!(&peer.shared_secret(small.public_value()).unwrap()[..], peer.public_value());
            assert_eq!(&small.shared_secret(peer.public_value()).unwrap()[..], peer.public_value());
        }
    }
}
