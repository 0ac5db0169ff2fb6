//! A sentence encoder whose vectors have the same bits on every platform.
//!
//! The network is a BERT encoder with mean pooling and L2 normalisation, the shape of
//! `sentence-transformers/all-MiniLM-L6-v2`: an operator gives a folder that holds the model as
//! its publisher ships it (`config.json`, `model.safetensors`, `tokenizer.json`, and, when
//! present, `sentence_bert_config.json` and `1_Pooling/config.json`), and [`Encoder::open`] reads
//! it. [`Encoder::id`] names the network and the blake3 hashes of the files read, so whatever
//! records a vector can also record exactly which model made it.
//!
//! Why our own forward pass rather than a tensor library: a search that ranks by these vectors
//! must give the same hits for the same query on every node, and a tensor library picks its
//! kernels by the processor it finds (fused multiply-add or not, vector width, threads), which
//! moves the last bits of a score. Here every sum runs in index order, as the code writes it:
//!
//! - a dense layer's output sums its products over the inputs in order, from zero, then adds its
//!   bias;
//! - a layer norm's mean and variance, an attention score's dot product, a softmax's
//!   denominator, an attention's weighted values and the mean pooling sum in index order too;
//! - the arithmetic is `f32`, each product rounded before its addition (Rust never fuses them),
//!   and `erf` and `exp` come from `libm`.
//!
//! The compiler may still carry neighbouring outputs in one vector register: each output has its
//! own running sum, whose sequence of operations is the same whichever instructions carry it.
//! Tests check the result against an independent implementation (candle's BERT) and pin the bits
//! of a vector.

mod network;

use std::fs;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use tokenizers::Tokenizer;

use network::Network;

/// What can go wrong opening a model or encoding a text.
#[derive(Debug, thiserror::Error)]
pub enum EncoderError {
    /// A file of the model could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A configuration file is not what this encoder runs.
    #[error("{path}: {message}")]
    Config {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// The weights file is not a readable safetensors file, or lacks a tensor the network needs,
    /// or holds one of another shape or type.
    #[error("{path}: {message}")]
    Weights {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// The tokenizer could not be read.
    #[error("{path}: {message}")]
    Tokenizer {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// The tokenizer failed on a text.
    #[error("the tokenizer failed: {0}")]
    Encode(String),
}

/// The parts of a BERT `config.json` the network needs.
#[derive(Debug, Clone, Deserialize)]
pub struct BertConfig {
    /// Width of every hidden state.
    pub hidden_size: usize,
    /// Number of transformer layers.
    pub num_hidden_layers: usize,
    /// Attention heads per layer; divides `hidden_size`.
    pub num_attention_heads: usize,
    /// Width of the feed-forward layer.
    pub intermediate_size: usize,
    /// Longest input the position embeddings cover.
    pub max_position_embeddings: usize,
    /// Size of the token vocabulary.
    pub vocab_size: usize,
    /// Number of token types (segments).
    pub type_vocab_size: usize,
    /// The layer norms' epsilon.
    pub layer_norm_eps: f64,
    /// The feed-forward activation; only `gelu` (the exact, erf one) is run.
    pub hidden_act: String,
}

#[derive(Debug, Deserialize)]
struct SentenceBertConfig {
    max_seq_length: usize,
}

#[derive(Debug, Deserialize)]
struct PoolingConfig {
    #[serde(default)]
    pooling_mode_cls_token: bool,
    #[serde(default)]
    pooling_mode_mean_tokens: bool,
    #[serde(default)]
    pooling_mode_max_tokens: bool,
    #[serde(default)]
    pooling_mode_mean_sqrt_len_tokens: bool,
}

/// A sentence encoder: a tokenizer and the network, read from a model folder.
pub struct Encoder {
    tokenizer: Tokenizer,
    network: Network,
    max_tokens: usize,
    id: String,
}

impl std::fmt::Debug for Encoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Encoder")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

fn read(path: &Path) -> Result<Vec<u8>, EncoderError> {
    fs::read(path).map_err(|source| EncoderError::Read {
        path: path.to_path_buf(),
        source,
    })
}

fn json<T: for<'de> Deserialize<'de>>(path: &Path, bytes: &[u8]) -> Result<T, EncoderError> {
    serde_json::from_slice(bytes).map_err(|e| EncoderError::Config {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

impl Encoder {
    /// Reads the model in `dir`.
    pub fn open(dir: &Path) -> Result<Self, EncoderError> {
        let config_path = dir.join("config.json");
        let config_bytes = read(&config_path)?;
        let config = check_config(&config_path, json(&config_path, &config_bytes)?)?;
        check_pooling(dir)?;
        let max_tokens = max_tokens(dir, &config)?;

        let weights_path = dir.join("model.safetensors");
        let weights = read(&weights_path)?;
        let network =
            Network::load(&config, &weights).map_err(|message| EncoderError::Weights {
                path: weights_path.clone(),
                message,
            })?;
        let (tokenizer, tokenizer_bytes) = read_tokenizer(dir)?;

        let id = format!(
            "bert-mean-l2 layers={} hidden={} max_tokens={} model=blake3:{} tokenizer=blake3:{} config=blake3:{}",
            config.num_hidden_layers,
            config.hidden_size,
            max_tokens,
            blake3::hash(&weights).to_hex(),
            blake3::hash(&tokenizer_bytes).to_hex(),
            blake3::hash(&config_bytes).to_hex(),
        );
        Ok(Self {
            tokenizer,
            network,
            max_tokens,
            id,
        })
    }

    /// Names the network and the exact files it was read from.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Width of the vectors.
    pub fn dimensions(&self) -> usize {
        self.network.hidden_size()
    }

    /// The token ids the network reads for `text`: `[CLS]`, the text's word pieces cut to the
    /// model's limit, `[SEP]`.
    pub fn tokens(&self, text: &str) -> Result<Vec<u32>, EncoderError> {
        let encoding = self
            .tokenizer
            .encode(text, true)
            .map_err(|e| EncoderError::Encode(e.to_string()))?;
        let mut ids = encoding.get_ids().to_vec();
        if ids.len() > self.max_tokens {
            // Keep the first word pieces and the closing `[SEP]`, as the model was trained.
            let last = ids[ids.len() - 1];
            ids.truncate(self.max_tokens - 1);
            ids.push(last);
        }
        Ok(ids)
    }

    /// The unit vector of `text`.
    pub fn embed(&self, text: &str) -> Result<Vec<f32>, EncoderError> {
        let ids = self.tokens(text)?;
        Ok(self.network.embed(&ids))
    }

    /// The vectors of `texts`, in order, computed on up to `threads` threads. Each text's
    /// vector is computed by one thread alone, so the bits do not depend on `threads`.
    pub fn embed_all(&self, texts: &[&str], threads: usize) -> Result<Vec<Vec<f32>>, EncoderError> {
        let threads = threads.clamp(1, texts.len().max(1));
        let chunk = texts.len().div_ceil(threads).max(1);
        let parts: Vec<Result<Vec<Vec<f32>>, EncoderError>> = std::thread::scope(|scope| {
            let handles: Vec<_> = texts
                .chunks(chunk)
                .map(|part| scope.spawn(move || part.iter().map(|t| self.embed(t)).collect()))
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(EncoderError::Encode("a worker panicked".into())))
                })
                .collect()
        });
        let mut out = Vec::with_capacity(texts.len());
        for part in parts {
            out.extend(part?);
        }
        Ok(out)
    }
}

/// The network's configuration, if it is one this encoder runs.
fn check_config(path: &Path, config: BertConfig) -> Result<BertConfig, EncoderError> {
    let problem = if config.hidden_act != "gelu" {
        Some(format!(
            "the activation is {:?}; this encoder runs `gelu` only",
            config.hidden_act
        ))
    } else if config.num_attention_heads == 0
        || !config
            .hidden_size
            .is_multiple_of(config.num_attention_heads)
    {
        Some(format!(
            "{} attention heads do not divide a hidden size of {}",
            config.num_attention_heads, config.hidden_size
        ))
    } else {
        None
    };
    match problem {
        Some(message) => Err(EncoderError::Config {
            path: path.to_path_buf(),
            message,
        }),
        None => Ok(config),
    }
}

/// Refuses a pooling other than the mean of the tokens, when the folder names one.
fn check_pooling(dir: &Path) -> Result<(), EncoderError> {
    let path = dir.join("1_Pooling").join("config.json");
    if !path.exists() {
        return Ok(());
    }
    let pooling: PoolingConfig = json(&path, &read(&path)?)?;
    if !pooling.pooling_mode_mean_tokens
        || pooling.pooling_mode_cls_token
        || pooling.pooling_mode_max_tokens
        || pooling.pooling_mode_mean_sqrt_len_tokens
    {
        return Err(EncoderError::Config {
            path,
            message: "the pooling is not the mean of the tokens, the only one this encoder runs"
                .into(),
        });
    }
    Ok(())
}

/// The most word pieces a text is given, `[CLS]` and `[SEP]` included.
fn max_tokens(dir: &Path, config: &BertConfig) -> Result<usize, EncoderError> {
    let path = dir.join("sentence_bert_config.json");
    let mut max = config.max_position_embeddings;
    if path.exists() {
        let sbert: SentenceBertConfig = json(&path, &read(&path)?)?;
        max = max.min(sbert.max_seq_length);
    }
    if max < 3 {
        return Err(EncoderError::Config {
            path,
            message: format!("a limit of {max} tokens leaves no room for a text"),
        });
    }
    Ok(max)
}

/// The model's tokenizer, set for whole texts one at a time (no padding; the cut is made by
/// [`Encoder::tokens`]), and the bytes it was read from.
fn read_tokenizer(dir: &Path) -> Result<(Tokenizer, Vec<u8>), EncoderError> {
    let path = dir.join("tokenizer.json");
    let bytes = read(&path)?;
    let problem = |e: tokenizers::Error| EncoderError::Tokenizer {
        path: path.clone(),
        message: e.to_string(),
    };
    let mut tokenizer = Tokenizer::from_bytes(&bytes).map_err(problem)?;
    tokenizer.with_padding(None);
    tokenizer.with_truncation(None).map_err(problem)?;
    Ok((tokenizer, bytes))
}

/// The cosine of two unit vectors, in `f64`, summed in index order.
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .fold(0.0f64, |s, (x, y)| s + f64::from(*x) * f64::from(*y))
}
