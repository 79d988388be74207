//! Load → save → load gives equal values for every example.

use aot::state::document;

use crate::common::{TestEnv, examples};

#[test]
fn every_example_round_trips_through_the_store() {
    for example in examples() {
        let env = TestEnv::new();
        let name = example.file_name().unwrap().to_str().unwrap();
        let path = env.example(name);
        let before = document::read(&path).unwrap().state;
        let mut store = env.store(&path);
        let (mut opened, _) = store.open().unwrap();
        // Saving with no new events rewrites the file from the types.
        store.commit(&mut opened, Vec::new()).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let after = document::read(&path).unwrap().state;
        let mut expected = before.clone();
        expected.run.revision = after.run.revision;
        assert_eq!(after, expected, "{name} changed in a round trip:\n{text}");
        assert!(
            text.starts_with("# yaml-language-server: $schema="),
            "{name} lost its schema line:\n{text}"
        );
    }
}

#[test]
fn literal_block_scalars_stay_literal() {
    let env = TestEnv::new();
    let path = env.example("single.yaml");
    let mut store = env.store(&path);
    let (mut state, _) = store.open().unwrap();
    store.commit(&mut state, Vec::new()).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        text.contains("      run: |\n        mkdir -p out\n        echo \"hello from aot\" > out/hello.txt\n"),
        "the multi-line command must stay a literal block:\n{text}"
    );
}
