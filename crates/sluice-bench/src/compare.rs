//! `sluice bench --compare iscsi`: the same suite over NVMe/TCP to the embedded target
//! and over iSCSI to Debian's tgtd, on sparse files of one size in a scratch directory
//! that is removed however the run ends.

use super::*;

/// `--compare iscsi`: the suite through fio over NVMe/TCP to the embedded target on a
/// sparse file, then over iSCSI to tgtd on another sparse file of the same size in the
/// same directory; both results, a comparison report and a side-by-side table.
pub(super) fn compare_iscsi(
    invocation: &Invocation<'_>,
    file_jobs: Option<Vec<JobSpec>>,
    tools: fio::FioTools,
    target_threads: usize,
    started: SystemTime,
) -> Result<ExitCode, BenchError> {
    let Invocation { args, suite_name, stop, paths } = *invocation;
    let scratch = ScratchDir::new()?;
    let nvme_file = scratch.0.join("nvme-tcp.img");
    let iscsi_file = scratch.0.join("iscsi.img");
    let cache = if args.direct_io { "O_DIRECT" } else { "through the page cache" };
    eprintln!(
        "sluice bench --compare iscsi: suite {suite_name} through {} over NVMe/TCP (Sluice's target), then over iSCSI (tgt), each on a sparse {} MiB file in {} ({cache})",
        tools.version,
        args.namespace_size >> 20,
        scratch.0.display()
    );

    let mut endpoint = exec::start_embedded(
        EmbeddedBackend::File { path: &nvme_file, direct_io: args.direct_io },
        args.namespace_size,
        target_threads,
        args.target_poll_mode.poll_mode(),
    )?;
    endpoint.host_io = args.host_io.io_path(true);
    let jobs = plan_jobs(args, suite_name, file_jobs, &endpoint)?;
    let capacity = endpoint.capacity;
    let lba_bytes = endpoint.lba_bytes;
    let common_note = format!(
        "compare iscsi: the same suite through {} over NVMe/TCP (Sluice's embedded target, Sluice's fio engine) and over iSCSI (tgt, fio's libiscsi engine); each target on its own sparse file, {cache}",
        tools.version
    );
    let mut nvme_driver = Driver::Fio(fio::FioRunner::new(tools.clone(), paths.fio_dir(Some("nvme-tcp")))?);
    let nvme = run_suite(invocation, &jobs, &endpoint, &mut nvme_driver, started, vec![common_note.clone()])?;
    drop(endpoint);

    // The NVMe/TCP result is written even when the iSCSI side fails.
    let iscsi = if stop.load(Ordering::Relaxed) {
        Ok(None)
    } else {
        run_iscsi_side(invocation, &jobs, &tools, &iscsi_file, (capacity, lba_bytes), common_note).map(Some)
    };
    drop(scratch);

    let sides =
        [Side { suffix: "-nvme-tcp", label: "NVMe/TCP (Sluice)" }, Side { suffix: "-iscsi", label: "iSCSI (tgt)" }];
    let table = |a: &BenchResult, b: &BenchResult| output::comparison_markdown(a, b);
    report_pair(paths, started, &sides, nvme, iscsi, table)
}

/// One side of a comparison: the suffix of its JSON file and its label in the report.
pub(super) struct Side<'a> {
    pub suffix: &'a str,
    pub label: &'a str,
}

/// Writes both results (the first even when the second side failed), the side-by-side
/// table `table` makes and the HTML report of both, prints where they are, and ends the
/// run like a single-result one.
pub(super) fn report_pair(
    paths: &OutputPaths,
    started: SystemTime,
    sides: &[Side<'_>; 2],
    first: Outcome,
    second: Result<Option<Outcome>, BenchError>,
    table: impl Fn(&BenchResult, &BenchResult) -> String,
) -> Result<ExitCode, BenchError> {
    let first_json = paths.with_suffix(sides[0].suffix, "json");
    let second_json = paths.with_suffix(sides[1].suffix, "json");
    let html = paths.with_suffix("", "html");
    let markdown = paths.with_suffix("", "md");
    write_file(&first_json, &(first.result.to_json_pretty() + "\n"))?;
    let mut labelled = vec![(sides[0].label.to_string(), first.result.clone())];
    let mut any_errors = first.any_errors;
    let second = match second {
        Ok(second) => second,
        Err(error) => {
            output::print_table(&first.result);
            println!();
            println!("result: {}", first_json.display());
            return Err(error);
        }
    };
    if let Some(second) = &second {
        write_file(&second_json, &(second.result.to_json_pretty() + "\n"))?;
        labelled.push((sides[1].label.to_string(), second.result.clone()));
        any_errors |= second.any_errors;
        let text = table(&first.result, &second.result);
        println!();
        print!("{text}");
        write_file(&markdown, &text)?;
    } else {
        output::print_table(&first.result);
    }
    write_file(&html, &bench_results::render_html(&labelled))?;
    println!();
    println!("result: {}", first_json.display());
    if second.is_some() {
        println!("result: {}", second_json.display());
        println!("table:  {}", markdown.display());
    }
    println!("report: {}", html.display());
    println!("fio job files and output: {}", paths.fio_dir(None).display());
    println!("took {:.1} s", started.elapsed().map_or(0.0, |d| d.as_secs_f64()));
    let mut results = vec![&first.result];
    if let Some(second) = &second {
        results.push(&second.result);
    }
    finish(&results, any_errors)
}

/// The iSCSI half of `--compare iscsi`: tgtd on `backing`, the suite through fio's
/// libiscsi engine, tgtd stopped in order whatever happened.
fn run_iscsi_side(
    invocation: &Invocation<'_>,
    jobs: &[JobSpec],
    tools: &fio::FioTools,
    backing: &Path,
    (capacity, lba_bytes): (u64, u32),
    common_note: String,
) -> Result<Outcome, BenchError> {
    let Invocation { args, paths, .. } = *invocation;
    std::fs::File::create(backing)
        .and_then(|file| file.set_len(capacity))
        .map_err(|e| BenchError::Runtime(format!("cannot create {}: {e}", backing.display())))?;
    let log_dir = paths.fio_dir(None);
    std::fs::create_dir_all(&log_dir)
        .map_err(|e| BenchError::Runtime(format!("cannot create {}: {e}", log_dir.display())))?;
    let tgtd = iscsi::Tgtd::start(backing, lba_bytes, args.direct_io, &log_dir.join("tgtd.log"))?;
    let version = tgtd.version();
    eprintln!(
        "  {version} (tgtd pid {}) serves {} LUN {} at {} (loopback only)",
        tgtd.pid(),
        iscsi::IQN,
        iscsi::LUN,
        tgtd.portal
    );
    let endpoint = Endpoint {
        address: tgtd.portal,
        nqn: iscsi::IQN.into(),
        nsid: NamespaceId(iscsi::LUN),
        lba_bytes,
        capacity,
        protocol: Protocol::Iscsi { tgtd_pid: tgtd.pid() },
        embedded: None,
        host_io: nvme_host_client::IoPath::default(),
        paths: Vec::new(),
    };
    let mut driver = Driver::Fio(fio::FioRunner::new(tools.clone(), paths.fio_dir(Some("iscsi")))?);
    let notes = vec![
        common_note,
        format!("iSCSI target: {version} (tgtd, userspace, backing store rdwr: pread/pwrite from a pool of threads)"),
    ];
    let outcome = run_suite(invocation, jobs, &endpoint, &mut driver, SystemTime::now(), notes);
    // Stopped in order before anything else happens, also after a failed run.
    if let Err(error) = tgtd.stop() {
        eprintln!("sluice: warning: {error}");
    }
    outcome
}

/// A private directory under the system's temporary directory, removed on drop (or,
/// after a second Ctrl-C, by [`ScratchDir::emergency_remove`]).
pub(super) struct ScratchDir(PathBuf);

/// The scratch directory in use, for a second Ctrl-C.
static SCRATCH: std::sync::Mutex<Option<PathBuf>> = std::sync::Mutex::new(None);

impl ScratchDir {
    fn new() -> Result<ScratchDir, BenchError> {
        let dir = std::env::temp_dir().join(format!("sluice-bench-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)
            .map_err(|e| BenchError::Runtime(format!("cannot create {}: {e}", dir.display())))?;
        *SCRATCH.lock().unwrap_or_else(|e| e.into_inner()) = Some(dir.clone());
        Ok(ScratchDir(dir))
    }

    pub(super) fn emergency_remove() {
        if let Some(dir) = SCRATCH.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        SCRATCH.lock().unwrap_or_else(|e| e.into_inner()).take();
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
