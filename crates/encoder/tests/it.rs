//! The encoder against an independent implementation of the same network (candle's BERT), and
//! the bits of its vectors pinned.
//!
//! The model is not part of the repository: these tests read it from the folder
//! `RESEARCH_LEDGER_ENCODER_DIR` names, and pass without running when it is not set, unless
//! `RESEARCH_LEDGER_REQUIRE_ENCODER=1` says the model must be there.

use std::path::PathBuf;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use encoder::{Encoder, cosine};

fn model_dir() -> Option<PathBuf> {
    match std::env::var_os("RESEARCH_LEDGER_ENCODER_DIR") {
        Some(dir) => Some(PathBuf::from(dir)),
        None => {
            assert!(
                std::env::var("RESEARCH_LEDGER_REQUIRE_ENCODER").as_deref() != Ok("1"),
                "RESEARCH_LEDGER_REQUIRE_ENCODER=1 but RESEARCH_LEDGER_ENCODER_DIR is not set"
            );
            eprintln!("RESEARCH_LEDGER_ENCODER_DIR is not set: skipped");
            None
        }
    }
}

const TEXTS: &[&str] = &[
    "Global warming is driving polar bears toward extinction.",
    "Polar bear populations are declining as Arctic sea ice melts.",
    "The stock market rose today.",
    "CO2 emissions from fossil fuels rose 1.7% in 2018, to 37 billion tonnes.",
    "全球变暖导致海平面上升。",
    "",
    "Ünïcödé àccents, punctuation!? and    odd\tspacing\nacross lines",
];

/// candle's BERT, read once, with the same pooling: the reference the fixed-order pass must
/// agree with.
struct Reference {
    model: BertModel,
    device: Device,
}

impl Reference {
    fn open(dir: &std::path::Path) -> Result<Self, Box<dyn std::error::Error>> {
        let device = Device::Cpu;
        let config: Config = serde_json::from_slice(&std::fs::read(dir.join("config.json"))?)?;
        let weights = std::fs::read(dir.join("model.safetensors"))?;
        let vb = VarBuilder::from_buffered_safetensors(weights, DType::F32, &device)?;
        let model = BertModel::load(vb, &config)?;
        Ok(Self { model, device })
    }

    fn embed(&self, ids: &[u32]) -> Result<Vec<f32>, Box<dyn std::error::Error>> {
        let input = Tensor::new(ids, &self.device)?.unsqueeze(0)?;
        let types = input.zeros_like()?;
        let states = self.model.forward(&input, &types, None)?;
        let mean = (states.sum(1)? / ids.len() as f64)?;
        let norm = mean.sqr()?.sum_keepdim(1)?.sqrt()?;
        let unit = mean.broadcast_div(&norm)?;
        Ok(unit.squeeze(0)?.to_vec1::<f32>()?)
    }
}

#[test]
fn vectors_agree_with_an_independent_implementation() {
    let Some(dir) = model_dir() else { return };
    let encoder = Encoder::open(&dir).unwrap();
    let reference = Reference::open(&dir).unwrap();
    for text in TEXTS {
        let ids = encoder.tokens(text).unwrap();
        let ours = encoder.embed(text).unwrap();
        let theirs = reference.embed(&ids).unwrap();
        assert_eq!(ours.len(), theirs.len());
        let worst = ours
            .iter()
            .zip(&theirs)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(worst < 2e-5, "{text:?}: components differ by up to {worst}");
        let c = cosine(&ours, &theirs);
        assert!(c > 0.999_999, "{text:?}: cosine {c}");
    }
}

#[test]
fn meaning_orders_neighbours() {
    let Some(dir) = model_dir() else { return };
    let encoder = Encoder::open(&dir).unwrap();
    let v = encoder.embed_all(&TEXTS[..3], 2).unwrap();
    // The two texts on polar bears are nearer each other than either is to the stock market.
    assert!(cosine(&v[0], &v[1]) > cosine(&v[0], &v[2]) + 0.3);
    assert!(cosine(&v[1], &v[0]) > cosine(&v[1], &v[2]) + 0.3);
    for u in &v {
        assert!((cosine(u, u) - 1.0).abs() < 1e-6);
    }
}

#[test]
fn the_bits_do_not_depend_on_threads_or_runs() {
    let Some(dir) = model_dir() else { return };
    let encoder = Encoder::open(&dir).unwrap();
    let one = encoder.embed_all(TEXTS, 1).unwrap();
    let three = encoder.embed_all(TEXTS, 3).unwrap();
    let again = Encoder::open(&dir).unwrap().embed_all(TEXTS, 2).unwrap();
    let bits = |v: &Vec<Vec<f32>>| -> Vec<Vec<u32>> {
        v.iter()
            .map(|x| x.iter().map(|f| f.to_bits()).collect())
            .collect()
    };
    assert_eq!(bits(&one), bits(&three));
    assert_eq!(bits(&one), bits(&again));
}

#[test]
fn long_texts_are_cut_to_the_models_limit() {
    let Some(dir) = model_dir() else { return };
    let encoder = Encoder::open(&dir).unwrap();
    let long = "warming ".repeat(2_000);
    let ids = encoder.tokens(&long).unwrap();
    let short = encoder.tokens("warming").unwrap();
    assert_eq!(ids.len(), 256);
    assert_eq!(ids.first(), short.first(), "starts with [CLS]");
    assert_eq!(ids.last(), short.last(), "ends with [SEP]");
    assert_eq!(encoder.embed(&long).unwrap().len(), encoder.dimensions());
}

/// A `config.json` of a tiny network with `heads` heads and activation `act`.
fn tiny_config(heads: usize, act: &str) -> String {
    format!(
        r#"{{"hidden_size":8,"num_hidden_layers":1,"num_attention_heads":{heads},"intermediate_size":8,
            "max_position_embeddings":8,"vocab_size":8,"type_vocab_size":1,"layer_norm_eps":1e-12,
            "hidden_act":"{act}"}}"#
    )
}

#[test]
fn a_model_folder_that_is_not_one_is_refused_with_the_file_named() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let config = dir.join("config.json");
    let err = Encoder::open(dir).unwrap_err().to_string();
    assert!(err.contains("config.json"), "{err}");
    std::fs::write(&config, tiny_config(3, "gelu")).unwrap();
    let err = Encoder::open(dir).unwrap_err().to_string();
    assert!(err.contains("do not divide"), "{err}");
    std::fs::write(&config, tiny_config(2, "relu")).unwrap();
    let err = Encoder::open(dir).unwrap_err().to_string();
    assert!(err.contains("gelu"), "{err}");
    std::fs::write(&config, tiny_config(2, "gelu")).unwrap();
    std::fs::write(dir.join("model.safetensors"), b"not a safetensors file").unwrap();
    let err = Encoder::open(dir).unwrap_err().to_string();
    assert!(err.contains("model.safetensors"), "{err}");
}

/// The model these bits are for: `model.safetensors` of `sentence-transformers/all-MiniLM-L6-v2`.
const PINNED_MODEL: &str = "model=blake3:";

#[test]
fn the_bits_of_a_vector_are_pinned() {
    let Some(dir) = model_dir() else { return };
    let encoder = Encoder::open(&dir).unwrap();
    let weights = blake3::hash(&std::fs::read(dir.join("model.safetensors")).unwrap());
    assert!(
        encoder
            .id()
            .contains(&format!("{PINNED_MODEL}{}", weights.to_hex()))
    );
    if weights.to_hex().as_str() != MINILM_L6_V2 {
        eprintln!("another model than all-MiniLM-L6-v2: its bits are not pinned here");
        return;
    }
    let v = encoder.embed(TEXTS[3]).unwrap();
    let bytes: Vec<u8> = v.iter().flat_map(|f| f.to_le_bytes()).collect();
    assert_eq!(blake3::hash(&bytes).to_hex().as_str(), PINNED_VECTOR);
}

/// blake3 of `model.safetensors` of all-MiniLM-L6-v2 (its sha256 is
/// `53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db`).
const MINILM_L6_V2: &str = "8087e9bf97c265f8435ed268733ecf3791825ad24850fd5d84d89e32ee3a589a";

/// blake3 of the little-endian bytes of the vector of `TEXTS[3]` under that model.
const PINNED_VECTOR: &str = "49878362535e740716805ebf09f4be61b62ca58c3b1e458af97300b720973074";
