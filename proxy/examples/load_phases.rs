//! Times each phase of loading a policy file: `cargo run --release -p sluice --example
//! load_phases -- FILE` (generate a large one with `SLUICE_BENCH_DUMP=FILE cargo bench -p
//! sluice --bench policy -- load`).
#![allow(clippy::print_stdout, clippy::expect_used, clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Instant;

use sluice::policy::{self, Compat, Diagnostics, Source, raw, report, yaml};

fn main() {
    let path = std::env::args().nth(1).expect("usage: load_phases FILE");
    let text = std::fs::read_to_string(&path).expect("read");
    let file: Arc<str> = Arc::from(path.as_str());
    for _ in 0..3 {
        let t = Instant::now();
        let root = yaml::parse(&text).expect("yaml").expect("document");
        let t_yaml = t.elapsed();
        let mut diags = Diagnostics::default();
        let t = Instant::now();
        let doc = raw::read(&file, &root, Compat::Strict, &mut diags);
        let t_raw = t.elapsed();
        let t = Instant::now();
        let validated = report::Validator {
            file: &file,
            diags: &mut diags,
            compat: Compat::Strict,
        }
        .document(&doc);
        let t_validate = t.elapsed();
        let t = Instant::now();
        policy::ambiguity::check(&validated.entries, &mut diags);
        let t_amb = t.elapsed();
        let t = Instant::now();
        drop((root, doc, validated));
        let t_drop = t.elapsed();
        let t = Instant::now();
        let loaded = policy::load(
            &[Source {
                name: path.clone(),
                text: text.clone(),
            }],
            Compat::Strict,
        )
        .expect("load");
        let t_all = t.elapsed();
        println!(
            "yaml {:?}  raw {:?}  validate {:?}  ambiguity {:?}  drop {:?}  | whole load {:?} ({} endpoints)",
            t_yaml,
            t_raw,
            t_validate,
            t_amb,
            t_drop,
            t_all,
            loaded.policy.endpoint_count()
        );
    }
}
