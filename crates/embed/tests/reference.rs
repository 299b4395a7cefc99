//! The built-in model against an independent implementation: `reference/reference.py` (numpy
//! over the same safetensors, float64) wrote `fixtures/reference.json`; every vector here must
//! point the same way. All sentences go in one batch, so padding and the 256-word-piece cut
//! are exercised too.

use parley_testkit::embeddings::cosine;
use serde::Deserialize;

#[derive(Deserialize)]
struct Reference {
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    text: String,
    vector: Vec<f32>,
}

#[tokio::test]
async fn built_in_vectors_match_the_numpy_reference() {
    let reference: Reference =
        serde_json::from_str(include_str!("fixtures/reference.json")).unwrap();
    let texts: Vec<String> = reference.cases.iter().map(|c| c.text.clone()).collect();
    let vectors = parley_testkit::embeddings::embedder()
        .embed(&texts)
        .await
        .unwrap();
    let mut lowest = f32::MAX;
    for (case, vector) in reference.cases.iter().zip(&vectors) {
        assert_eq!(vector.len(), case.vector.len());
        let similarity = cosine(vector, &case.vector);
        lowest = lowest.min(similarity);
        assert!(similarity >= 0.9999, "{similarity} for {:?}", case.text);
    }
    println!("lowest cosine to the reference: {lowest}");
}
