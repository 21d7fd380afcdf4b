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
    let endpoint = exec::start_embedded(EmbeddedBackend::Rbd(image.to_string()), args.namespace_size, target_threads)?;
    let jobs = plan_jobs(args, suite_name, file_jobs, &endpoint)?;
    let (capacity, lba_bytes) = (endpoint.capacity, endpoint.lba_bytes);
    let common_note = format!(
        "compare fio-rbd: the same suite on RBD image {image} ({cluster}) through Sluice (embedded target, rbd \
         backend, {target_threads} runtime thread(s)) and through {}'s rbd engine without any target; one \
         after the other",
        tools.version
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
        };
        fio::FioRunner::new(tools.clone(), paths.fio_dir(Some("fio-rbd"))).and_then(|runner| {
            let mut driver = Driver::Fio(runner);
            let notes = vec![common_note, "fio-rbd: no target, no network hop: librbd in the fio process".into()];
            run_suite(invocation, &jobs, &endpoint, &mut driver, SystemTime::now(), notes).map(Some)
        })
    };

    let sluice_json = paths.with_suffix("-sluice-rbd", "json");
    let direct_json = paths.with_suffix("-fio-rbd", "json");
    let html = paths.with_suffix("", "html");
    let markdown = paths.with_suffix("", "md");
    write_file(&sluice_json, &(sluice.result.to_json_pretty() + "\n"))?;
    let direct = match direct {
        Ok(direct) => direct,
        Err(error) => {
            output::print_table(&sluice.result);
            println!();
            println!("result: {}", sluice_json.display());
            return Err(error);
        }
    };
    let mut labelled = vec![("Sluice (NVMe/TCP, rbd backend)".to_string(), sluice.result.clone())];
    let mut any_errors = sluice.any_errors;
    if let Some(direct) = &direct {
        write_file(&direct_json, &(direct.result.to_json_pretty() + "\n"))?;
        labelled.push(("fio rbd engine".to_string(), direct.result.clone()));
        any_errors |= direct.any_errors;
        let sides = output::Sides {
            title: "Sluice (NVMe/TCP to the embedded target, rbd backend) vs fio's rbd engine (librbd in fio)",
            a: "Sluice",
            b: "fio-rbd",
        };
        let table = output::labelled_comparison_markdown(&sluice.result, &direct.result, &sides);
        println!();
        print!("{table}");
        write_file(&markdown, &table)?;
    } else {
        output::print_table(&sluice.result);
    }
    write_file(&html, &bench_results::render_html(&labelled))?;
    println!();
    println!("result: {}", sluice_json.display());
    if direct.is_some() {
        println!("result: {}", direct_json.display());
        println!("table:  {}", markdown.display());
    }
    println!("report: {}", html.display());
    println!("took {:.1} s", started.elapsed().map_or(0.0, |d| d.as_secs_f64()));
    let mut results = vec![&sluice.result];
    if let Some(direct) = &direct {
        results.push(&direct.result);
    }
    finish(&results, any_errors)
}
