//! `sluice bench --compare fio-rbd`: the same suite through Sluice to a Ceph RBD image
//! (the embedded target with an `rbd` backend) and through fio's own rbd engine
//! straight to the same image, one after the other, so the cost of the NVMe/TCP hop
//! and of Sluice's target over plain librbd is measured on one cluster in one run.

use std::net::SocketAddr;

use super::*;

/// `--compare fio-rbd`: both results, a comparison report and a side-by-side table.
pub(super) fn compare_fio_rbd(
    invocation: &Invocation<'_>,
    file_jobs: Option<Vec<JobSpec>>,
    tools: fio::FioTools,
    image: &str,
    target_threads: usize,
    started: SystemTime,
) -> Result<ExitCode, BenchError> {
    let Invocation { args, suite_name, stop, paths } = *invocation;
    // fio (with Sluice's engine) unless --driver sluice: the same load generator on
    // both sides, and one that sleeps while it waits; Sluice's host polls, which on a
    // machine that also runs the OSDs takes CPU from them (measured here: 20-30 %
    // fewer IOPS through Sluice's host than through fio on every profile).
    let sluice_host = args.driver.as_deref() == Some("sluice");
    let cluster = std::env::var("CEPH_CONF").unwrap_or_else(|_| "librados' default ceph.conf".into());
    eprintln!(
        "sluice bench --compare fio-rbd: suite {suite_name} on RBD image {image} ({cluster}): through Sluice's \
         target ({}), then through fio's rbd engine ({})",
        if sluice_host { "Sluice's host" } else { "fio and Sluice's engine" },
        tools.version
    );
    let poll_mode = args.target_poll_mode.poll_mode();
    let mut endpoint =
        exec::start_embedded(EmbeddedBackend::Rbd(image.to_string()), args.namespace_size, target_threads, poll_mode)?;
    endpoint.host_io = args.host_io.io_path(true);
    let host_io = endpoint.host_io;
    let jobs = plan_jobs(args, suite_name, file_jobs, &endpoint)?;
    let (capacity, lba_bytes) = (endpoint.capacity, endpoint.lba_bytes);
    let spins = host_io == nvme_host_client::IoPath::Ring(nvme_host_client::PollMode::BusyPoll);
    let common_note = format!(
        "compare fio-rbd: the same suite on RBD image {image} ({cluster}) through Sluice (embedded target, rbd \
         backend, {target_threads} runtime thread(s) in {} mode) and through {}'s rbd engine without any target; one \
         after the other; both initiators {} (--host-io)",
        args.target_poll_mode.name(),
        tools.version,
        if spins {
            "spin for completions (fio rbd busy_poll=1)"
        } else {
            "sleep until completions (fio rbd busy_poll=0)"
        }
    );
    let mut sluice_driver = if sluice_host {
        Driver::SluiceHost
    } else {
        Driver::Fio(fio::FioRunner::new(tools.clone(), paths.fio_dir(Some("sluice-rbd")))?)
    };
    let sluice = run_suite(invocation, &jobs, &endpoint, &mut sluice_driver, started, vec![common_note.clone()])?;
    // Closes the image: fio's engine would otherwise fight the target for its
    // exclusive lock.
    drop(endpoint);

    // The Sluice result is written even when the fio-rbd side fails.
    let direct = if stop.load(Ordering::Relaxed) {
        Ok(None)
    } else {
        let endpoint = Endpoint {
            address: SocketAddr::from(([127, 0, 0, 1], 0)),
            nqn: image.to_string(),
            nsid: NamespaceId(1),
            lba_bytes,
            capacity,
            protocol: Protocol::Rbd,
            embedded: None,
            // fio's rbd engine waits as the Sluice side's initiator did (see `job_file`).
            host_io,
            paths: Vec::new(),
        };
        fio::FioRunner::new(tools.clone(), paths.fio_dir(Some("fio-rbd"))).and_then(|runner| {
            let mut driver = Driver::Fio(runner);
            let notes = vec![common_note, "fio-rbd: no target, no network hop: librbd in the fio process".into()];
            run_suite(invocation, &jobs, &endpoint, &mut driver, SystemTime::now(), notes).map(Some)
        })
    };

    let sides = [
        compare::Side { suffix: "-sluice-rbd", label: "Sluice (NVMe/TCP, rbd backend)" },
        compare::Side { suffix: "-fio-rbd", label: "fio rbd engine" },
    ];
    let labels = output::Sides {
        title: "Sluice (NVMe/TCP to the embedded target, rbd backend) vs fio's rbd engine (librbd in fio)",
        a: "Sluice",
        b: "fio-rbd",
    };
    let table = |a: &BenchResult, b: &BenchResult| output::labelled_comparison_markdown(a, b, &labels);
    compare::report_pair(paths, started, &sides, sluice, direct, table)
}
