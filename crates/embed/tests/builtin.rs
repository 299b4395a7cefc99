//! The built-in model as a caller sees it: its identity, unit vectors, order kept across
//! batches, and meaning (a paraphrase is nearer than an unrelated sentence).

use parley_embed::{EmbedSettings, Embedder};
use parley_testkit::embeddings::embedder;

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
    dot / (norm(a) * norm(b))
}

#[tokio::test]
async fn the_built_in_model_is_all_minilm_with_384_dimensions() {
    let embedder = embedder();
    assert_eq!(embedder.model_id(), "all-MiniLM-L6-v2@384");
    assert_eq!(embedder.dims(), 384);
    let vector = embedder
        .embed_one("How do I set a transaction's isolation level?")
        .await
        .unwrap();
    assert_eq!(vector.len(), 384);
    let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() < 1e-4, "{norm}");
}

#[tokio::test]
async fn a_paraphrase_is_nearer_than_an_unrelated_sentence() {
    let texts = [
        "how do I keep a transaction from changing data?",
        "SET TRANSACTION READ ONLY prevents a transaction from writing to tables.",
        "The cat sat on the warm windowsill all afternoon.",
    ]
    .map(String::from);
    let v = embedder().embed(&texts).await.unwrap();
    assert!(cosine(&v[0], &v[1]) > cosine(&v[0], &v[2]) + 0.2);
}

#[tokio::test]
async fn vectors_come_back_in_input_order_whatever_the_batch_size() {
    let texts: Vec<String> = (0..11)
        .map(|i| format!("sentence number {i} {}", "word ".repeat(i * 7)))
        .collect();
    let whole = embedder().embed(&texts).await.unwrap();
    let mut settings = EmbedSettings::built_in(parley_testkit::model_dir());
    settings.batch = 3;
    let batched = Embedder::from_settings(&settings)
        .unwrap()
        .embed(&texts)
        .await
        .unwrap();
    assert_eq!(whole.len(), texts.len());
    for (i, text) in texts.iter().enumerate() {
        let alone = embedder().embed_one(text).await.unwrap();
        assert!(cosine(&alone, &whole[i]) > 0.9999, "text {i} moved");
        assert!(
            cosine(&alone, &batched[i]) > 0.9999,
            "text {i} moved in batches of 3"
        );
    }
    assert!(embedder().embed(&[]).await.unwrap().is_empty());
}

#[test]
fn a_missing_model_directory_names_the_install_command() {
    let err = Embedder::from_settings(&EmbedSettings::built_in("/nonexistent/model".into()))
        .unwrap_err()
        .to_string();
    assert!(err.contains("scripts/model install"), "{err}");
    assert!(err.contains("/nonexistent/model"), "{err}");
}
