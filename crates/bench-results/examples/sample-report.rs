//! Writes the HTML report of the built-in sample result (and a second, slightly different
//! copy, to show the comparison table) to the path given as the first argument.
//! The JSON of the sample is written next to it (`<path>.json`).
//!
//! `cargo run -p bench-results --example sample-report --features sample -- OUT.html`

use bench_results::{render_html, sample::sample_result, validate};

fn main() {
    let out = std::env::args().nth(1).unwrap_or_else(|| "sample-report.html".to_string());
    let a = sample_result();
    validate(&a).expect("the sample result is valid");
    let mut b = a.clone();
    b.driver = "fio".into();
    for run in &mut b.runs {
        let k = 0.9 + 0.05 * (run.name.len() % 4) as f64;
        run.iops *= k;
        run.bytes_per_second *= k;
        run.ios = (run.iops * run.duration_seconds).round() as u64;
        run.bytes = run.ios * run.block_size as u64;
        run.latency_us.mean /= k;
        for p in &mut run.latency_us.percentiles {
            p.value /= k;
        }
        run.latency_us.min /= k;
        run.latency_us.max /= k;
        if let Some(phases) = &mut run.target_phases_us {
            phases.receive /= k;
            phases.send /= k;
        }
    }
    let html = render_html(&[("sample-sluice-host.json".into(), a.clone()), ("sample-fio.json".into(), b)]);
    std::fs::write(&out, html).unwrap_or_else(|e| panic!("writing {out}: {e}"));
    std::fs::write(format!("{out}.json"), a.to_json_pretty() + "\n")
        .unwrap_or_else(|e| panic!("writing {out}.json: {e}"));
    println!("{out}");
}
