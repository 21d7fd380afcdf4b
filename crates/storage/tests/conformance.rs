//! The conformance suite against the RAM and null backends, plus checks that the suite
//! itself catches broken backends.

use std::sync::Arc;

use storage::conformance;
use storage::{Backend, BackendQueue, Geometry, NullBackend, RamBackend};

fn geometry(block_size_bytes: u32, block_count: u64) -> Geometry {
    Geometry { block_size_bytes, block_count }
}

/// 4 MiB, 512-byte blocks, default 1 MiB chunks: the model covers the whole device.
fn ram_small() -> Arc<dyn Backend> {
    RamBackend::new(geometry(512, 8192))
}

/// 4 KiB chunks under 4 KiB blocks: nearly every multi-block I/O crosses chunks.
fn ram_small_chunks() -> Arc<dyn Backend> {
    RamBackend::with_chunk_size(geometry(4096, 1024), 4096).unwrap()
}

/// 64 KiB blocks over 4 KiB chunks: every block spans sixteen chunks.
fn ram_large_blocks() -> Arc<dyn Backend> {
    RamBackend::with_chunk_size(geometry(65536, 96), 4096).unwrap()
}

/// 1 GiB with a partial last chunk: larger than the model, so its window logic runs.
fn ram_one_gib() -> Arc<dyn Backend> {
    RamBackend::new(geometry(4096, (1 << 18) + 3))
}

fn null() -> Arc<dyn Backend> {
    NullBackend::new(geometry(4096, 1 << 18))
}

/// One test per check and backend, so failures name both and the checks run in parallel.
macro_rules! conformance_tests {
    ($module:ident, $factory:path) => {
        mod $module {
            use super::*;

            #[test]
            fn describes_itself() {
                conformance::describes_itself(&$factory);
            }
            #[test]
            fn queue_depth_round_trip() {
                conformance::queue_depth_round_trip(&$factory);
            }
            #[test]
            fn read_after_write() {
                conformance::read_after_write(&$factory);
            }
            #[test]
            fn write_flush_read() {
                conformance::write_flush_read(&$factory);
            }
            #[test]
            fn fua_write() {
                conformance::fua_write(&$factory);
            }
            #[test]
            fn write_zeroes() {
                conformance::write_zeroes(&$factory);
            }
            #[test]
            fn deallocate_reads_zeroes() {
                conformance::deallocate_reads_zeroes(&$factory);
            }
            #[test]
            fn out_of_range() {
                conformance::out_of_range(&$factory);
            }
            #[test]
            fn buffer_length_mismatch() {
                conformance::buffer_length_mismatch(&$factory);
            }
            #[test]
            fn concurrent_disjoint_ranges() {
                conformance::concurrent_disjoint_ranges(&$factory);
            }
            #[test]
            fn random_ops_match_model() {
                conformance::random_ops_match_model(&$factory);
            }
        }
    };
}

conformance_tests!(ram_512_byte_blocks, ram_small);
conformance_tests!(ram_4k_chunks, ram_small_chunks);
conformance_tests!(ram_64k_blocks, ram_large_blocks);
conformance_tests!(ram_1_gib, ram_one_gib);
conformance_tests!(null_backend, null);

/// `run_all` is what other crates call; make sure it runs end to end.
#[test]
fn run_all_passes_for_null() {
    conformance::run_all(&null);
}

// ---- The suite has teeth: deliberately broken backends must fail it. ----

/// Claims to retain data but is really the null backend.
struct Forgetful(Arc<NullBackend>);

impl Backend for Forgetful {
    fn geometry(&self) -> Geometry {
        self.0.geometry()
    }
    fn has_volatile_write_cache(&self) -> bool {
        false
    }
    fn kind(&self) -> &'static str {
        "forgetful"
    }
    fn open_queue(&self) -> Box<dyn BackendQueue> {
        self.0.open_queue()
    }
}

/// Reports one block more than it can actually address.
struct Overstated(Arc<RamBackend>);

impl Backend for Overstated {
    fn geometry(&self) -> Geometry {
        let real = self.0.geometry();
        Geometry { block_count: real.block_count + 1, ..real }
    }
    fn has_volatile_write_cache(&self) -> bool {
        false
    }
    fn kind(&self) -> &'static str {
        "overstated"
    }
    fn open_queue(&self) -> Box<dyn BackendQueue> {
        self.0.open_queue()
    }
}

fn forgetful() -> Arc<dyn Backend> {
    Arc::new(Forgetful(NullBackend::new(geometry(512, 1024))))
}

fn overstated() -> Arc<dyn Backend> {
    Arc::new(Overstated(RamBackend::new(geometry(512, 1024))))
}

#[test]
#[should_panic(expected = "forgetful")]
fn a_backend_that_loses_writes_fails_read_after_write() {
    conformance::read_after_write(&forgetful);
}

#[test]
#[should_panic(expected = "diverged from the model")]
fn a_backend_that_loses_writes_fails_the_model() {
    conformance::random_ops_match_model(&forgetful);
}

#[test]
#[should_panic(expected = "overstated")]
fn a_backend_with_a_wrong_block_count_fails_out_of_range() {
    conformance::out_of_range(&overstated);
}
