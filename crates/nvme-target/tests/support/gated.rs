//! A backend whose requests wait at a gate the test opens: storage that has a
//! request "in flight" for as long as the test wants.

use std::sync::{Arc, Mutex};

use nvme_spec::NamespaceId;
use nvme_target::{HostAccess, ListenerSpec, NamespaceSpec, SubsystemSpec, Target, TargetSettings, TargetSpec};
use storage::{Backend, BackendQueue, Geometry, IoCompletion, IoRequest, RamBackend};

use super::{BLOCK_BYTES, NAMESPACE_BLOCKS, NQN};

/// Requests wait here until the test opens the gate; then the RAM backend runs them.
#[derive(Default)]
pub struct Gate {
    pub open: bool,
    pub held: Vec<IoRequest>,
}

/// A queue opened with a waker says it wakes the thread (as RBD's and the file
/// backend's queues do), which is all the runtime asks of it.
pub struct GatedBackend {
    inner: Arc<dyn Backend>,
    gate: Arc<Mutex<Gate>>,
}

impl Backend for GatedBackend {
    fn geometry(&self) -> Geometry {
        self.inner.geometry()
    }
    fn has_volatile_write_cache(&self) -> bool {
        false
    }
    fn kind(&self) -> &'static str {
        "gated"
    }
    fn open_queue(&self) -> Box<dyn BackendQueue> {
        Box::new(GatedQueue { inner: self.inner.open_queue(), gate: self.gate.clone(), submitted: 0, waking: false })
    }
    fn open_queue_with_waker(&self, _waker: &std::task::Waker) -> Box<dyn BackendQueue> {
        Box::new(GatedQueue { inner: self.inner.open_queue(), gate: self.gate.clone(), submitted: 0, waking: true })
    }
}

struct GatedQueue {
    inner: Box<dyn BackendQueue>,
    gate: Arc<Mutex<Gate>>,
    /// Requests given to `inner` and not reaped yet.
    submitted: usize,
    /// Opened with a waker.
    waking: bool,
}

impl GatedQueue {
    fn pass_through(&mut self) {
        let mut gate = self.gate.lock().unwrap();
        if gate.open {
            for request in gate.held.drain(..) {
                self.inner.submit(request);
                self.submitted += 1;
            }
        }
    }
}

impl BackendQueue for GatedQueue {
    fn submit(&mut self, request: IoRequest) {
        self.gate.lock().unwrap().held.push(request);
        self.pass_through();
    }
    fn reap(&mut self, out: &mut Vec<IoCompletion>) {
        self.pass_through();
        let before = out.len();
        self.inner.reap(out);
        self.submitted -= out.len() - before;
    }
    fn in_flight(&self) -> usize {
        self.gate.lock().unwrap().held.len() + self.submitted
    }
    fn wakes_on_completion(&self) -> bool {
        self.waking
    }
}

pub fn gated_target(settings: TargetSettings) -> (Arc<Target>, Arc<Mutex<Gate>>, Arc<dyn Backend>) {
    let ram = RamBackend::new(Geometry { block_size_bytes: BLOCK_BYTES, block_count: NAMESPACE_BLOCKS });
    let gate = Arc::new(Mutex::new(Gate::default()));
    let backend: Arc<dyn Backend> = Arc::new(GatedBackend { inner: ram.clone(), gate: gate.clone() });
    let target = Target::new(TargetSpec {
        listeners: vec![ListenerSpec::tcp("127.0.0.1", 4420)],
        subsystems: vec![SubsystemSpec {
            hosts: HostAccess::allow_any(),
            pool: None,
            nqn: NQN.into(),
            serial_number: None,
            model_number: None,
            namespaces: vec![NamespaceSpec { id: NamespaceId(1), backend, nguid: None, uuid: None, ana_group: None }],
        }],
        settings,
    })
    .expect("valid target");
    (target, gate, ram)
}

/// Block 0 as the RAM backend holds it.
pub fn block_zero(ram: &Arc<dyn Backend>) -> Vec<u8> {
    let mut queue = ram.open_queue();
    let request =
        IoRequest { token: 0, op: storage::IoOp::Read { lba: 0, blocks: 1 }, buffer: vec![0; BLOCK_BYTES as usize] };
    queue.submit(request);
    let mut done = Vec::new();
    queue.reap(&mut done);
    done.pop().expect("the RAM backend completes at once").buffer
}
