//! The f16 query path (`src/query.rs`) against the f32 model it stands in for: every vector
//! within cosine 0.9999, over the chinook questions, manual questions and odd texts, alone and
//! a few to a call, so that queries stay comparable with chunks ingested by the f32 path.

use parley_embed::BuiltIn;
use parley_testkit::embeddings::{cosine, model_dir};

/// The chinook domain's 80 labelled questions, 40 of the manual's, and texts that are short,
/// empty, odd or near the path's 64 word pieces.
fn texts() -> Vec<String> {
    let mut texts: Vec<String> = include_str!("../../../domains/chinook/eval/questions.jsonl")
        .lines()
        .map(|line| {
            let value: serde_json::Value = serde_json::from_str(line).unwrap();
            value["question"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(texts.len(), 80);
    texts.extend(
        include_str!("../../../tools/bench/data/manual_questions.toml")
            .lines()
            .filter_map(|line| line.strip_prefix("q = \"")?.strip_suffix('"'))
            .take(40)
            .map(str::to_owned),
    );
    texts.extend(
        [
            "",
            "invoice",
            "VACUUM",
            "SELECT * FROM chinook.track WHERE milliseconds > 300000 ORDER BY name LIMIT 10;",
            "¿Cuántas facturas emitió Björk en 2013? Ça coûte combien ?",
            "東京の売上は？ 🎵🎸 top-selling genres ✨",
            "12345 67.89 -0.001 1e10 0xFF",
            "!!! ??? ... --- ***",
            "how do I keep a transaction from changing data, and what happens to the other \
             sessions that are reading the same rows while it runs, and can they see \
             uncommitted changes or only what was committed before they started their own",
        ]
        .map(str::to_owned),
    );
    texts
}

#[test]
fn the_query_path_stays_within_cosine_0_9999_of_the_f32_model() {
    let fast = BuiltIn::load(&model_dir(), 32).unwrap();
    let exact = BuiltIn::load_f32(&model_dir(), 32).unwrap();
    if !fast.has_query_path() {
        eprintln!("this CPU has no AVX-512: every text takes the f32 path, nothing to compare");
    }
    let texts = texts();
    let reference = exact.embed_blocking(&texts).unwrap();
    let mut lowest = f32::MAX;
    let mut check = |vector: &[f32], i: usize, how: &str| {
        let similarity = cosine(vector, &reference[i]);
        lowest = lowest.min(similarity);
        assert!(
            similarity >= 0.9999,
            "{similarity} for {:?} {how}",
            texts[i]
        );
    };
    for (i, text) in texts.iter().enumerate() {
        let alone = fast.embed_blocking(std::slice::from_ref(text)).unwrap();
        check(&alone[0], i, "alone");
    }
    // Three texts to a call: one forward pass over their word pieces packed together.
    for start in (0..texts.len()).step_by(3) {
        let end = (start + 3).min(texts.len());
        let vectors = fast.embed_blocking(&texts[start..end]).unwrap();
        for (i, vector) in (start..end).zip(&vectors) {
            check(vector, i, "three to a call");
        }
    }
    println!(
        "lowest cosine to the f32 model over {} texts: {lowest}",
        texts.len()
    );
}

#[test]
fn longer_inputs_take_the_f32_path_unchanged() {
    let fast = BuiltIn::load(&model_dir(), 32).unwrap();
    let exact = BuiltIn::load_f32(&model_dir(), 32).unwrap();
    let long =
        vec!["a chunk of a manual page, long enough to be well past the query path ".repeat(8)];
    assert_eq!(
        fast.embed_blocking(&long).unwrap(),
        exact.embed_blocking(&long).unwrap()
    );
}
