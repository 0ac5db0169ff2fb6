//! The forward pass, with every sum in a fixed order (see the crate's documentation).

use safetensors::{Dtype, SafeTensors};

use crate::BertConfig;

/// A dense layer: `y = W x + b`. `W` is kept transposed, one row per input, so the outputs of
/// an input are side by side.
#[derive(Debug)]
struct Linear {
    transposed: Vec<f32>,
    bias: Vec<f32>,
    inputs: usize,
    outputs: usize,
}

#[derive(Debug)]
struct LayerNorm {
    gamma: Vec<f32>,
    beta: Vec<f32>,
    eps: f32,
}

#[derive(Debug)]
struct Layer {
    query: Linear,
    key: Linear,
    value: Linear,
    attention_out: Linear,
    attention_norm: LayerNorm,
    intermediate: Linear,
    output: Linear,
    output_norm: LayerNorm,
}

/// A BERT encoder's weights, with mean pooling and L2 normalisation on top.
#[derive(Debug)]
pub(crate) struct Network {
    words: Vec<f32>,
    positions: Vec<f32>,
    token_type: Vec<f32>,
    embedding_norm: LayerNorm,
    layers: Vec<Layer>,
    hidden: usize,
    heads: usize,
    vocab: usize,
    max_positions: usize,
}

/// The tensors of one weights file, found under either naming (with or without `bert.`).
struct Tensors<'a> {
    file: SafeTensors<'a>,
    prefix: &'static str,
}

impl Tensors<'_> {
    fn get(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>, String> {
        let full = format!("{}{name}", self.prefix);
        let view = self
            .file
            .tensor(&full)
            .map_err(|e| format!("tensor {full}: {e}"))?;
        if view.dtype() != Dtype::F32 {
            return Err(format!("tensor {full} is {:?}, not F32", view.dtype()));
        }
        if view.shape() != shape {
            return Err(format!(
                "tensor {full} has shape {:?}, the configuration needs {shape:?}",
                view.shape()
            ));
        }
        Ok(view
            .data()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect())
    }

    fn linear(&self, name: &str, inputs: usize, outputs: usize) -> Result<Linear, String> {
        // Stored as PyTorch keeps it: one row per output.
        let weight = self.get(&format!("{name}.weight"), &[outputs, inputs])?;
        let mut transposed = vec![0f32; weight.len()];
        for (o, row) in weight.chunks_exact(inputs).enumerate() {
            for (k, w) in row.iter().enumerate() {
                transposed[k * outputs + o] = *w;
            }
        }
        Ok(Linear {
            transposed,
            bias: self.get(&format!("{name}.bias"), &[outputs])?,
            inputs,
            outputs,
        })
    }

    fn norm(&self, name: &str, width: usize, eps: f32) -> Result<LayerNorm, String> {
        // Older checkpoints name a layer norm's parameters `gamma` and `beta`.
        let gamma = self
            .get(&format!("{name}.weight"), &[width])
            .or_else(|_| self.get(&format!("{name}.gamma"), &[width]))?;
        let beta = self
            .get(&format!("{name}.bias"), &[width])
            .or_else(|_| self.get(&format!("{name}.beta"), &[width]))?;
        Ok(LayerNorm { gamma, beta, eps })
    }
}

impl Network {
    /// Reads the weights `config` describes from a safetensors file's bytes.
    pub(crate) fn load(config: &BertConfig, bytes: &[u8]) -> Result<Self, String> {
        let file = SafeTensors::deserialize(bytes).map_err(|e| e.to_string())?;
        let prefix = if file.tensor("embeddings.word_embeddings.weight").is_ok() {
            ""
        } else {
            "bert."
        };
        let t = Tensors { file, prefix };
        let h = config.hidden_size;
        // The epsilon as the reference runs it: the configuration's value rounded to f32.
        let eps = config.layer_norm_eps as f32;
        let mut layers = Vec::with_capacity(config.num_hidden_layers);
        for l in 0..config.num_hidden_layers {
            let p = format!("encoder.layer.{l}");
            layers.push(Layer {
                query: t.linear(&format!("{p}.attention.self.query"), h, h)?,
                key: t.linear(&format!("{p}.attention.self.key"), h, h)?,
                value: t.linear(&format!("{p}.attention.self.value"), h, h)?,
                attention_out: t.linear(&format!("{p}.attention.output.dense"), h, h)?,
                attention_norm: t.norm(&format!("{p}.attention.output.LayerNorm"), h, eps)?,
                intermediate: t.linear(
                    &format!("{p}.intermediate.dense"),
                    h,
                    config.intermediate_size,
                )?,
                output: t.linear(&format!("{p}.output.dense"), config.intermediate_size, h)?,
                output_norm: t.norm(&format!("{p}.output.LayerNorm"), h, eps)?,
            });
        }
        Ok(Self {
            words: t.get("embeddings.word_embeddings.weight", &[config.vocab_size, h])?,
            positions: t.get(
                "embeddings.position_embeddings.weight",
                &[config.max_position_embeddings, h],
            )?,
            token_type: t.get(
                "embeddings.token_type_embeddings.weight",
                &[config.type_vocab_size, h],
            )?,
            embedding_norm: t.norm("embeddings.LayerNorm", h, eps)?,
            layers,
            hidden: h,
            heads: config.num_attention_heads,
            vocab: config.vocab_size,
            max_positions: config.max_position_embeddings,
        })
    }

    /// Width of the hidden states and of the sentence vector.
    pub(crate) fn hidden_size(&self) -> usize {
        self.hidden
    }

    /// The hidden states of the last layer for `ids`, one row of `hidden_size` per token.
    /// Ids past the vocabulary read as id 0 and tokens past the position limit are dropped;
    /// [`crate::Encoder`] never sends either.
    pub(crate) fn hidden_states(&self, ids: &[u32]) -> Vec<f32> {
        let h = self.hidden;
        let n = ids.len().min(self.max_positions);
        let mut x = vec![0f32; n * h];
        for (i, &id) in ids.iter().take(n).enumerate() {
            let id = if (id as usize) < self.vocab {
                id as usize
            } else {
                0
            };
            let row = &mut x[i * h..(i + 1) * h];
            let word = &self.words[id * h..(id + 1) * h];
            let position = &self.positions[i * h..(i + 1) * h];
            // Token type 0: every text is a single segment.
            let segment = &self.token_type[..h];
            for j in 0..h {
                row[j] = (word[j] + position[j]) + segment[j];
            }
        }
        self.embedding_norm.apply(&mut x, h);

        let mut q = Vec::new();
        let mut k = Vec::new();
        let mut v = Vec::new();
        let mut context = vec![0f32; n * h];
        let mut projected = Vec::new();
        let mut inner = Vec::new();
        let mut scores = vec![0f32; n];
        for layer in &self.layers {
            layer.query.apply(&x, n, &mut q);
            layer.key.apply(&x, n, &mut k);
            layer.value.apply(&x, n, &mut v);
            self.attend(&q, &k, &v, n, &mut scores, &mut context);
            layer.attention_out.apply(&context, n, &mut projected);
            add_in_place(&mut x, &projected);
            layer.attention_norm.apply(&mut x, h);

            layer.intermediate.apply(&x, n, &mut inner);
            for a in inner.iter_mut() {
                *a = gelu(*a);
            }
            layer.output.apply(&inner, n, &mut projected);
            add_in_place(&mut x, &projected);
            layer.output_norm.apply(&mut x, h);
        }
        x
    }

    /// Self-attention of `n` tokens, head by head: each token's context is the softmax-weighted
    /// sum of the values, in token order.
    fn attend(
        &self,
        q: &[f32],
        k: &[f32],
        v: &[f32],
        n: usize,
        scores: &mut [f32],
        context: &mut [f32],
    ) {
        let h = self.hidden;
        let d = h / self.heads;
        let scale = (d as f32).sqrt();
        for head in 0..self.heads {
            let at = head * d;
            for i in 0..n {
                let qi = &q[i * h + at..i * h + at + d];
                let mut max = f32::NEG_INFINITY;
                for (j, s) in scores.iter_mut().enumerate() {
                    *s = dot(qi, &k[j * h + at..j * h + at + d]) / scale;
                    max = max.max(*s);
                }
                let mut total = 0f32;
                for s in scores.iter_mut() {
                    *s = libm::expf(*s - max);
                    total += *s;
                }
                let out = &mut context[i * h + at..i * h + at + d];
                out.fill(0.0);
                for (j, s) in scores.iter().enumerate() {
                    let p = *s / total;
                    let vj = &v[j * h + at..j * h + at + d];
                    for c in 0..d {
                        out[c] += p * vj[c];
                    }
                }
            }
        }
    }

    /// The sentence vector of `ids`: the mean of the last hidden states, scaled to length 1.
    pub(crate) fn embed(&self, ids: &[u32]) -> Vec<f32> {
        let h = self.hidden;
        let x = self.hidden_states(ids);
        let n = x.len() / h;
        let mut mean = vec![0f32; h];
        for row in x.chunks_exact(h) {
            for (m, a) in mean.iter_mut().zip(row) {
                *m += *a;
            }
        }
        if n > 0 {
            let count = n as f32;
            for m in mean.iter_mut() {
                *m /= count;
            }
        }
        let mut norm = 0f32;
        for m in &mean {
            norm += m * m;
        }
        // As sentence-transformers' `Normalize`: divide by the norm, at least 1e-12.
        let norm = norm.sqrt().max(1e-12);
        for m in mean.iter_mut() {
            *m /= norm;
        }
        mean
    }
}

impl Linear {
    /// `y[r] = W x[r] + b` for each of `rows` rows of `x`. Each output sums its products in
    /// input order, starting from zero, then adds its bias. The loops run over the outputs
    /// innermost, four rows at a time: every output has its own running sum, so the compiler
    /// may put neighbouring outputs in one vector register without changing any sum's order.
    fn apply(&self, x: &[f32], rows: usize, y: &mut Vec<f32>) {
        let (i, o) = (self.inputs, self.outputs);
        y.clear();
        y.resize(rows * o, 0.0);
        let mut blocks = y.chunks_exact_mut(4 * o);
        let mut r = 0;
        for block in blocks.by_ref() {
            let (y0, rest) = block.split_at_mut(o);
            let (y1, rest) = rest.split_at_mut(o);
            let (y2, y3) = rest.split_at_mut(o);
            for k in 0..i {
                let w = &self.transposed[k * o..(k + 1) * o];
                let (a0, a1, a2, a3) = (
                    x[r * i + k],
                    x[(r + 1) * i + k],
                    x[(r + 2) * i + k],
                    x[(r + 3) * i + k],
                );
                let rows = y0.iter_mut().zip(y1.iter_mut()).zip(y2.iter_mut());
                for (((b0, b1), b2), (b3, wj)) in rows.zip(y3.iter_mut().zip(w)) {
                    *b0 += a0 * wj;
                    *b1 += a1 * wj;
                    *b2 += a2 * wj;
                    *b3 += a3 * wj;
                }
            }
            r += 4;
        }
        for row in blocks.into_remainder().chunks_exact_mut(o) {
            for k in 0..i {
                let w = &self.transposed[k * o..(k + 1) * o];
                let a = x[r * i + k];
                for (yj, wj) in row.iter_mut().zip(w) {
                    *yj += a * wj;
                }
            }
            r += 1;
        }
        for row in y.chunks_exact_mut(o) {
            for (yj, bj) in row.iter_mut().zip(&self.bias) {
                *yj += bj;
            }
        }
    }
}

impl LayerNorm {
    /// Normalises each row of `x` (of width `width`) in place.
    fn apply(&self, x: &mut [f32], width: usize) {
        let count = width as f32;
        for row in x.chunks_exact_mut(width) {
            let mut sum = 0f32;
            for a in row.iter() {
                sum += *a;
            }
            let mean = sum / count;
            let mut squares = 0f32;
            for a in row.iter() {
                let c = *a - mean;
                squares += c * c;
            }
            let deviation = (squares / count + self.eps).sqrt();
            for ((a, g), b) in row.iter_mut().zip(&self.gamma).zip(&self.beta) {
                *a = ((*a - mean) / deviation) * g + b;
            }
        }
    }
}

fn add_in_place(x: &mut [f32], y: &[f32]) {
    for (a, b) in x.iter_mut().zip(y) {
        *a += *b;
    }
}

/// The exact GELU: `x · (1 + erf(x / √2)) / 2`.
fn gelu(x: f32) -> f32 {
    0.5 * x * (1.0 + libm::erff(x / std::f32::consts::SQRT_2))
}

/// The dot product, summed in index order.
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut s = 0f32;
    for (x, y) in a.iter().zip(b) {
        s += x * y;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values that make the order of a sum matter: large and small, of both signs.
    fn values(n: usize, seed: u32) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                let m = (s >> 8) as f32 / (1u32 << 24) as f32 - 0.5;
                m * [1e-4f32, 1.0, 3e3][(s % 3) as usize]
            })
            .collect()
    }

    #[test]
    fn a_dense_layer_sums_each_output_in_input_order_whatever_the_row_count() {
        let (inputs, outputs) = (13, 11);
        let weight = values(inputs * outputs, 1);
        let mut transposed = vec![0f32; weight.len()];
        for o in 0..outputs {
            for k in 0..inputs {
                transposed[k * outputs + o] = weight[o * inputs + k];
            }
        }
        let layer = Linear {
            transposed,
            bias: values(outputs, 2),
            inputs,
            outputs,
        };
        for rows in 0..10 {
            let x = values(rows * inputs, 3 + rows as u32);
            let mut y = Vec::new();
            layer.apply(&x, rows, &mut y);
            assert_eq!(y.len(), rows * outputs);
            for r in 0..rows {
                for o in 0..outputs {
                    let mut s = 0f32;
                    for k in 0..inputs {
                        s += x[r * inputs + k] * weight[o * inputs + k];
                    }
                    s += layer.bias[o];
                    assert_eq!(
                        y[r * outputs + o].to_bits(),
                        s.to_bits(),
                        "row {r} of {rows}"
                    );
                }
            }
        }
    }
}
