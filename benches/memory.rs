//! Memory benchmark: a query over 1,000,000 Megrams in 100,000 distinct
//! (space, entity) pairs, after load (target ≤ 5 ms). Load time and file size
//! are printed once. Run with `cargo bench --bench memory`.

use std::hint::black_box;
use std::io::Write;
use std::time::Instant;

use aot::memory::{Entry, Level, Megram, MemoryFile};
use aot::model::time::Timestamp;
use criterion::{Criterion, criterion_group, criterion_main};

const MEGRAMS: usize = 1_000_000;
const PAIRS: usize = 100_000;
const T0: u64 = 1_767_225_600_000;

fn write_memory(path: &std::path::Path) {
    let states = ["change_approach", "change_path", "success", "refine", "break_symmetry"];
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).expect("create memory"));
    for i in 0..MEGRAMS {
        let pair = i % PAIRS;
        let state = states[i % states.len()];
        let row = aot::memory::row(state).expect("row");
        let entry = Entry::megram(Megram {
            id: format!("m{i:x}"),
            level: Level::M,
            t: Timestamp::from_millis(T0 + (i as u64) * 1_000),
            t_recalled: None,
            space: format!("tool-{}", pair % 1_000),
            entity: format!("target-{}", pair / 1_000),
            content: format!("`atom-{pair}` failed run in round {}", i / PAIRS),
            state: state.to_string(),
            f: row.f,
            sigma: row.sigma,
            k: row.k,
        });
        serde_json::to_writer(&mut out, &entry).expect("write");
        out.write_all(b"\n").expect("write");
    }
    out.flush().expect("flush");
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("memory.jsonl");
    write_memory(&path);
    let file = MemoryFile::new(&path);
    let started = Instant::now();
    let loaded = file.load().expect("load");
    let load = started.elapsed();
    eprintln!(
        "memory: {} Megrams, {} pairs, {:.1} MiB, loaded in {:.2} s",
        loaded.memory.len(),
        PAIRS,
        loaded.bytes as f64 / (1024.0 * 1024.0),
        load.as_secs_f64()
    );
    let memory = loaded.memory;
    let now = Timestamp::from_millis(T0 + 30 * 86_400_000);
    let mut i = 0usize;
    c.bench_function("query one (space, entity) of 100,000 over 1,000,000 Megrams", |b| {
        b.iter(|| {
            i = (i + 7_919) % PAIRS;
            let space = format!("tool-{}", i % 1_000);
            let entity = format!("target-{}", i / 1_000);
            black_box(memory.query(&space, &entity, now).action())
        })
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(50);
    targets = bench
}
criterion_main!(benches);
