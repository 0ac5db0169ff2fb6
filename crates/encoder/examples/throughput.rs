//! Embeds the first N lines' `content` of a JSON Lines file and prints the rate.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let model = args
        .next()
        .ok_or("usage: throughput MODEL_DIR FILE.jsonl [N] [THREADS]")?;
    let file = args
        .next()
        .ok_or("usage: throughput MODEL_DIR FILE.jsonl [N] [THREADS]")?;
    let n: usize = args.next().map_or(Ok(500), |a| a.parse())?;
    let threads: usize = args.next().map_or(Ok(1), |a| a.parse())?;
    let encoder = encoder::Encoder::open(std::path::Path::new(&model))?;
    let texts: Vec<String> = std::fs::read_to_string(file)?
        .lines()
        .take(n)
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l)
                .ok()
                .and_then(|v| v["content"].as_str().map(str::to_owned))
                .unwrap_or_default()
        })
        .collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let tokens: usize = refs
        .iter()
        .map(|t| encoder.tokens(t).map_or(0, |v| v.len()))
        .sum();
    let start = std::time::Instant::now();
    let v = encoder.embed_all(&refs, threads)?;
    let s = start.elapsed().as_secs_f64();
    println!(
        "{} texts, {tokens} tokens, {threads} threads: {s:.2} s, {:.1} texts/s, {:.0} tokens/s",
        v.len(),
        v.len() as f64 / s,
        tokens as f64 / s
    );
    Ok(())
}
