//! What every check does to a queue: submit and wait, reap exactly, compare bytes,
//! and the deterministic data they write. A leaf of the suite: the checks and the
//! oracle use it, it uses neither.

use std::time::{Duration, Instant};

use crate::{BackendQueue, IoCompletion, IoRequest};

/// Smallest device the suite runs on: room for four threads' disjoint ranges.
pub const MIN_BLOCK_COUNT: u64 = 64;

/// How long [`submit_and_wait`] waits for an asynchronous backend before failing.
pub const COMPLETION_TIMEOUT: Duration = Duration::from_secs(30);

/// Submits one request on a queue with nothing else in flight and reaps until its
/// completion arrives (spinning with `yield_now`, for asynchronous backends). Panics if
/// the queue hands back a different token, loses the request, or takes longer than
/// [`COMPLETION_TIMEOUT`].
pub fn submit_and_wait(queue: &mut dyn BackendQueue, request: IoRequest) -> IoCompletion {
    assert_eq!(queue.in_flight(), 0, "submit_and_wait needs an idle queue");
    let token = request.token;
    queue.submit(request);
    let mut completions = reap_exactly(queue, 1);
    let completion = completions.pop().expect("reap_exactly returns one completion");
    assert_eq!(completion.token, token, "completion carries another request's token");
    completion
}

/// Reaps until `count` completions have arrived and nothing is left in flight.
pub fn reap_exactly(queue: &mut dyn BackendQueue, count: usize) -> Vec<IoCompletion> {
    let deadline = Instant::now() + COMPLETION_TIMEOUT;
    let mut completions = Vec::with_capacity(count);
    loop {
        queue.reap(&mut completions);
        assert!(completions.len() <= count, "reaped {} completions for {count} requests", completions.len());
        if completions.len() == count {
            assert_eq!(queue.in_flight(), 0, "in_flight is not zero after reaping everything");
            return completions;
        }
        assert!(
            queue.in_flight() > 0,
            "{} of {count} requests vanished: nothing in flight and no completion",
            count - completions.len()
        );
        assert!(Instant::now() < deadline, "no completion within {COMPLETION_TIMEOUT:?}");
        std::thread::yield_now();
    }
}

/// Deterministic data that differs per seed and per byte position, so a misplaced or
/// stale block never compares equal by accident. SplitMix64, 8 bytes per step.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03;
    let mut bytes = Vec::with_capacity(len + 8);
    while bytes.len() < len {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut mixed = state;
        mixed = (mixed ^ (mixed >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        mixed = (mixed ^ (mixed >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        mixed ^= mixed >> 31;
        bytes.extend_from_slice(&mixed.to_le_bytes());
    }
    bytes.truncate(len);
    bytes
}

/// Panics with the first differing offset instead of dumping two large buffers.
pub(crate) fn assert_same_bytes(actual: &[u8], expected: &[u8], context: &str) {
    assert_eq!(actual.len(), expected.len(), "{context}: length differs");
    if let Some(offset) = actual.iter().zip(expected).position(|(a, e)| a != e) {
        panic!(
            "{context}: data differs first at byte {offset} (got {:#04x}, expected {:#04x})",
            actual[offset], expected[offset]
        );
    }
}
