//! `research-ledger bench decisions`: how often the service's verdicts agree with the labels of
//! real claims, end to end through its own tools, for each rule set.
//!
//! The data is Climate-FEVER (Diggelmann et al., 2020, "CLIMATE-FEVER: A Dataset for
//! Verification of Real-World Climate Claims"; the dataset's release file is
//! `climate-fever-dataset-r1.jsonl`): real climate claims labelled `SUPPORTS`, `REFUTES`,
//! `NOT_ENOUGH_INFO` or `DISPUTED`, each with five Wikipedia sentences that annotators labelled
//! the same way. `--data DIR` names a folder holding the claims as `climate-fever.jsonl` or under
//! the release's name (one claim a line: `claim_id`, `claim`, `claim_label`, `evidences[]` with
//! `evidence_id`, `evidence_label`, `article`, `evidence`), and optionally `evidence.jsonl`, the
//! distinct sentences flattened for ingest (`id`, `title`, `source`, `url`, `source_type`,
//! `content`). Without it the sentences are taken from the claims file, each once, as
//! `en.wikipedia.org` texts of type `other`.
//!
//! In a temporary data directory, the sentences are ingested with a default publish date (they
//! carry none), then each claim of the selection is researched through the service's tools as an
//! assistant would, once per rule set and research date:
//! - **retrieval**: open a task with the claim as its question, search the corpus (the claim as
//!   the query, top 10), screen as a perfect screener would (adopt a hit the annotators tied to
//!   the claim, with their stance; reject the rest), then conflicts, matrix, conclusion;
//! - **oracle**: the claim's annotated sentences added directly as the client's evidence (dated
//!   by default, as in the corpus), adopted with their stances, then the same steps.
//!
//! Each runs at today's research date and at the evidence's default date. The verdict is
//! compared with the label: `SUPPORTS` → `supportive`, `REFUTES` → `opposing`,
//! `NOT_ENOUGH_INFO` → `evidence_insufficient`, `DISPUTED` → `uncertain`. The report gives, per
//! rule set, mode and date, the confusion matrix and the agreement; the share of verdicts that
//! change when only the research date moves; and, for retrieval, the ceiling: the share of claims
//! whose adopted evidence holds exactly the sides their label needs, which no rule set can beat
//! with this search.
//!
//! The selection is fixed and documented so a figure can be reproduced: the claims file in its
//! order, cut into blocks of `--claims N`; `--sample K` takes block K (from 0). Blocks are
//! disjoint, so parameters chosen on one block can be checked on another.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use chrono::NaiveDate;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use service::{Caller, Service};
use sources::Defaults;

use crate::Outcome;
use crate::commands::ingest::ingest_with_progress;

/// Arguments of `bench decisions`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Folder with Climate-FEVER's claims (`climate-fever.jsonl` or the release's
    /// `climate-fever-dataset-r1.jsonl`) and optionally `evidence.jsonl`; `docs/rules.md` says
    /// where the data comes from.
    #[arg(long, value_name = "DIR")]
    data: PathBuf,

    /// Claims per sample.
    #[arg(long, default_value_t = 200)]
    claims: usize,

    /// Which block of `--claims` claims, in file order, from 0; blocks are disjoint.
    #[arg(long, default_value_t = 0)]
    sample: usize,

    /// Publish date given to the sentences, which carry none; also the second research date.
    #[arg(long, value_name = "YYYY-MM-DD", default_value = "2020-01-01")]
    default_publish_date: NaiveDate,

    /// Hits asked for per claim in retrieval mode.
    #[arg(long, default_value_t = 10)]
    top: u32,

    /// Overrides applied to every `v2` task, as the `rules` argument of `research_open_task`
    /// (without `rule_set`), e.g. `{"side_weight_ratio": 3}`: to measure a variant.
    #[arg(long, value_name = "JSON")]
    v2_rules: Option<String>,

    /// Print the figures as one JSON object.
    #[arg(long)]
    json: bool,

    /// Run in this new or empty directory and keep what it wrote (every task, to replay or
    /// explain afterwards) instead of a temporary directory removed afterwards.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

#[derive(Debug, Deserialize)]
struct Claim {
    claim_id: String,
    claim: String,
    claim_label: String,
    #[serde(default)]
    evidences: Vec<ClaimEvidence>,
}

#[derive(Debug, Deserialize)]
struct ClaimEvidence {
    evidence_id: String,
    evidence_label: String,
    #[serde(default)]
    article: String,
    #[serde(default)]
    evidence: String,
}

/// The claims file in `dir`, under either name it is known by.
fn claims_file(dir: &Path) -> anyhow::Result<PathBuf> {
    for name in ["climate-fever.jsonl", "climate-fever-dataset-r1.jsonl"] {
        let path = dir.join(name);
        if path.is_file() {
            return Ok(path);
        }
    }
    bail!(
        "{} holds neither climate-fever.jsonl nor climate-fever-dataset-r1.jsonl",
        dir.display()
    )
}

/// The sentences for ingest: `evidence.jsonl` when `dir` has it, else every distinct evidence
/// sentence of the claims, written to `scratch` in the same shape.
fn evidence_file(dir: &Path, claims: &[Claim], scratch: &Path) -> anyhow::Result<PathBuf> {
    let given = dir.join("evidence.jsonl");
    if given.is_file() {
        return Ok(given);
    }
    let mut seen = std::collections::HashSet::new();
    let mut out = String::new();
    for e in claims.iter().flat_map(|c| &c.evidences) {
        if e.evidence.trim().is_empty() || !seen.insert(e.evidence_id.as_str()) {
            continue;
        }
        let line = json!({
            "id": e.evidence_id,
            "title": e.article,
            "source": "en.wikipedia.org",
            "url": format!("https://en.wikipedia.org/wiki/{}", e.article.replace(' ', "_")),
            "source_type": "other",
            "content": e.evidence,
        });
        out.push_str(&line.to_string());
        out.push('\n');
    }
    std::fs::create_dir_all(scratch)
        .with_context(|| format!("cannot create {}", scratch.display()))?;
    let path = scratch.join("evidence.jsonl");
    std::fs::write(&path, out).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

#[derive(Debug, Deserialize)]
struct Sentence {
    id: String,
    content: String,
}

/// The verdicts, in the order of the confusion matrices' columns.
const VERDICTS: [&str; 4] = [
    "supportive",
    "opposing",
    "uncertain",
    "evidence_insufficient",
];

/// The labels, in the order of the rows.
const LABELS: [&str; 4] = ["SUPPORTS", "REFUTES", "DISPUTED", "NOT_ENOUGH_INFO"];

fn expected_verdict(label: &str) -> &'static str {
    match label {
        "SUPPORTS" => "supportive",
        "REFUTES" => "opposing",
        "DISPUTED" => "uncertain",
        _ => "evidence_insufficient",
    }
}

fn stance_of(label: &str) -> &'static str {
    match label {
        "SUPPORTS" => "supports",
        "REFUTES" => "opposes",
        _ => "neutral",
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
enum Mode {
    Retrieval,
    Oracle,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
enum When {
    Today,
    DefaultDate,
}

/// Each run's verdicts in claim order, by rule set, mode and research date.
type Verdicts = BTreeMap<(String, Mode, When), Vec<String>>;

/// The figures of one rule set, mode and research date.
#[derive(Debug, Serialize)]
struct Run {
    rule_set: String,
    mode: Mode,
    research_date: String,
    agreement: f64,
    /// Rows: labels; columns: verdicts (see `labels` and `verdicts`).
    confusion: Vec<Vec<u64>>,
    /// Retrieval only: claims whose adopted evidence holds the sides their label needs.
    ceiling: Option<f64>,
}

/// What the bench measured.
#[derive(Debug, Serialize)]
struct Report {
    bench: &'static str,
    claims: usize,
    sample: usize,
    first_line: usize,
    labels_in_sample: BTreeMap<String, u64>,
    default_publish_date: String,
    today: String,
    top: u32,
    /// How the search ranked: BM25F, or BM25F mixed with a sentence encoder's cosine (with the
    /// encoder's id), as the index state id names it.
    ranking: String,
    labels: [&'static str; 4],
    verdicts: [&'static str; 4],
    runs: Vec<Run>,
    /// Per rule set and mode: share of claims whose verdict differs between the two dates.
    date_sensitivity: Vec<Value>,
}

pub(crate) fn run(args: &Args) -> anyhow::Result<Outcome> {
    let claims_path = claims_file(&args.data)?;
    if args.claims == 0 {
        bail!("--claims must be at least 1");
    }
    let all: Vec<Claim> = super::read_lines(&claims_path)?;
    let first = args.sample.saturating_mul(args.claims);
    let claims: Vec<&Claim> = all.iter().skip(first).take(args.claims).collect();
    if claims.is_empty() {
        bail!(
            "{} holds {} claims; sample {} of {} starts beyond them",
            claims_path.display(),
            all.len(),
            args.sample,
            args.claims
        );
    }
    let v2_overrides = v2_overrides(args)?;
    let scratch = super::Scratch::new(args.dir.as_deref())?;
    let evidence_path = evidence_file(&args.data, &all, &scratch.path().join("sentences"))?;
    let sentences: Vec<Sentence> = super::read_lines(&evidence_path)?;
    let text_of: HashMap<&str, &str> = sentences
        .iter()
        .map(|s| (s.id.as_str(), s.content.as_str()))
        .collect();
    // Kept with `--dir`, this is a data directory the other commands (`replay --check`,
    // `explain`) read.
    let service = open_service(&scratch.path().join("data"), &evidence_path, args)?;
    let bench = Bench {
        service: &service,
        caller: Caller::new("bench-decisions"),
        text_of: &text_of,
        args,
    };
    let today = chrono::Utc::now().date_naive();
    let dates = [
        (When::Today, today),
        (When::DefaultDate, args.default_publish_date),
    ];
    let (runs, verdicts) = bench.every_run(&claims, &v2_overrides, dates)?;
    let report = Report {
        bench: "decisions",
        claims: claims.len(),
        sample: args.sample,
        first_line: first + 1,
        labels_in_sample: labels_in(&claims),
        default_publish_date: args.default_publish_date.to_string(),
        today: today.to_string(),
        top: args.top,
        ranking: service
            .corpus()
            .similarity()
            .map_or_else(|| sources::corpus::RANKING.name(), |s| s.ranking_name()),
        labels: LABELS,
        verdicts: VERDICTS,
        runs,
        date_sensitivity: date_sensitivity(&verdicts, claims.len()),
    };
    // Kept with `--dir`, the directory is then whole: its read models snapshotted and every
    // event under a signed checkpoint, so an export of it holds every task.
    service.shutdown();
    if args.json {
        say!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_report(&report);
    }
    Ok(Outcome::Passed)
}

/// The overrides of `v2`'s parameters given with `--v2-rules`.
fn v2_overrides(args: &Args) -> anyhow::Result<Map<String, Value>> {
    match &args.v2_rules {
        None => Ok(Map::new()),
        Some(text) => match serde_json::from_str(text).context("--v2-rules is not JSON")? {
            Value::Object(map) => Ok(map),
            _ => bail!("--v2-rules must be a JSON object"),
        },
    }
}

/// A service in `data_dir` with the evidence sentences ingested, dated by default.
fn open_service(data_dir: &Path, evidence_path: &Path, args: &Args) -> anyhow::Result<Service> {
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("cannot create {}", data_dir.display()))?;
    let service = Service::open(crate::config::service_options(data_dir))
        .context("cannot open a service in the benchmark's directory")?;
    super::phase("ingesting the evidence sentences");
    let defaults = Defaults {
        publish_date: Some(args.default_publish_date),
        ..Defaults::default()
    };
    let report = ingest_with_progress(
        service.corpus(),
        std::slice::from_ref(&evidence_path.to_path_buf()),
        &defaults,
    )?;
    if !report.is_clean() {
        for error in &report.errors {
            tell!("error: {error}");
        }
        bail!("{} evidence sentences could not be ingested", report.failed);
    }
    Ok(service)
}

/// How many claims of the selection carry each label.
fn labels_in(claims: &[&Claim]) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for claim in claims {
        *out.entry(claim.claim_label.clone()).or_insert(0u64) += 1;
    }
    out
}

/// Per rule set and mode, the share of claims whose verdict differs between the two dates.
fn date_sensitivity(verdicts: &Verdicts, claims: usize) -> Vec<Value> {
    let mut out = Vec::new();
    for rule_set in ["v1", "v2"] {
        for mode in [Mode::Retrieval, Mode::Oracle] {
            let today = &verdicts[&(rule_set.to_owned(), mode, When::Today)];
            let other = &verdicts[&(rule_set.to_owned(), mode, When::DefaultDate)];
            let changed = today.iter().zip(other).filter(|(a, b)| a != b).count();
            out.push(json!({
                "rule_set": rule_set,
                "mode": mode,
                "verdicts_changed": changed as f64 / claims as f64,
            }));
        }
    }
    out
}

/// The verdict of one researched claim and the sides of the evidence adopted.
struct Researched {
    verdict: String,
    supports: usize,
    opposes: usize,
}

impl Researched {
    /// Whether the adopted evidence holds exactly the sides the label needs: the best any rule
    /// set could do with it.
    fn sides_match(&self, label: &str) -> bool {
        let (s, o) = (self.supports > 0, self.opposes > 0);
        match label {
            "SUPPORTS" => s && !o,
            "REFUTES" => o && !s,
            "DISPUTED" => s && o,
            _ => !s && !o,
        }
    }
}

/// What researching a claim needs: the service with the sentences ingested, the caller, the
/// sentences' texts by id and the bench's arguments.
struct Bench<'a> {
    service: &'a Service,
    caller: Caller,
    text_of: &'a HashMap<&'a str, &'a str>,
    args: &'a Args,
}

impl Bench<'_> {
    /// Calls a tool as the bench's caller, answering its structured content.
    fn call(&self, name: &str, arguments: Value) -> anyhow::Result<Value> {
        self.service
            .call_tool(&self.caller, name, &arguments)
            .map(|out| out.structured)
            .map_err(|e| anyhow::anyhow!("{name}: {}", e.to_json()))
    }

    /// Every rule set, mode and research date over the claims: the runs, and each one's
    /// verdicts.
    fn every_run(
        &self,
        claims: &[&Claim],
        v2_overrides: &Map<String, Value>,
        dates: [(When, NaiveDate); 2],
    ) -> anyhow::Result<(Vec<Run>, Verdicts)> {
        let mut runs = Vec::new();
        let mut verdicts: Verdicts = BTreeMap::new();
        for rule_set in ["v1", "v2"] {
            let mut rules = match rule_set {
                "v2" => v2_overrides.clone(),
                _ => Map::new(),
            };
            rules.insert("rule_set".into(), json!(rule_set));
            let rules = Value::Object(rules);
            for mode in [Mode::Retrieval, Mode::Oracle] {
                for (when, date) in dates {
                    let (run, these) = self.measure(claims, rule_set, &rules, mode, date)?;
                    runs.push(run);
                    verdicts.insert((rule_set.to_owned(), mode, when), these);
                }
            }
        }
        Ok((runs, verdicts))
    }

    /// Researches every claim under one rule set, mode and research date: the run's figures,
    /// and the verdicts in claim order.
    fn measure(
        &self,
        claims: &[&Claim],
        rule_set: &str,
        rules: &Value,
        mode: Mode,
        date: NaiveDate,
    ) -> anyhow::Result<(Run, Vec<String>)> {
        super::phase(&format!("{rule_set}, {mode:?} mode, research date {date}"));
        let bar = crate::commands::progress_bar(claims.len() as u64, "researching");
        let mut confusion = vec![vec![0u64; VERDICTS.len()]; LABELS.len()];
        let (mut agree, mut reachable) = (0usize, 0usize);
        let mut verdicts = Vec::with_capacity(claims.len());
        for claim in claims {
            let outcome = self
                .research_claim(claim, rules, mode, date)
                .with_context(|| format!("claim {}", claim.claim_id))?;
            bar.inc(1);
            let row = LABELS
                .iter()
                .position(|l| *l == claim.claim_label)
                .unwrap_or(LABELS.len() - 1);
            let column = VERDICTS
                .iter()
                .position(|v| *v == outcome.verdict)
                .context("unknown verdict")?;
            confusion[row][column] += 1;
            if outcome.verdict == expected_verdict(&claim.claim_label) {
                agree += 1;
            }
            if outcome.sides_match(&claim.claim_label) {
                reachable += 1;
            }
            verdicts.push(outcome.verdict);
        }
        bar.finish_and_clear();
        let n = claims.len() as f64;
        let run = Run {
            rule_set: rule_set.to_owned(),
            mode,
            research_date: date.to_string(),
            agreement: agree as f64 / n,
            confusion,
            ceiling: (mode == Mode::Retrieval).then_some(reachable as f64 / n),
        };
        Ok((run, verdicts))
    }

    /// One claim from opening its task to the conclusion.
    fn research_claim(
        &self,
        claim: &Claim,
        rules: &Value,
        mode: Mode,
        research_date: NaiveDate,
    ) -> anyhow::Result<Researched> {
        let opened = self.call(
            "research_open_task",
            json!({
                "question": claim.claim,
                "research_date": research_date.to_string(),
                "rules": rules,
            }),
        )?;
        let task_id = opened["task_id"]
            .as_str()
            .context("research_open_task gave no task_id")?
            .to_owned();
        let annotated = self.annotated(claim);
        let decisions = match mode {
            Mode::Retrieval => self.screen_retrieved(&task_id, &annotated)?,
            Mode::Oracle => self.add_annotated(&task_id, &annotated)?,
        };
        let (mut supports, mut opposes) = (0, 0);
        for decision in &decisions {
            match decision["stance"].as_str() {
                Some("supports") => supports += 1,
                Some("opposes") => opposes += 1,
                _ => {}
            }
        }
        if !decisions.is_empty() {
            self.call(
                "synthesis_screen_evidence",
                json!({"task_id": task_id, "decisions": decisions}),
            )?;
        }
        for tool in [
            "evaluation_conflict_resolution",
            "evaluation_build_decision_matrix",
        ] {
            self.call(tool, json!({"task_id": task_id}))?;
        }
        let concluded = self.call(
            "evaluation_generate_conclusion",
            json!({"task_id": task_id}),
        )?;
        let verdict = concluded["stance"]
            .as_str()
            .context("the conclusion has no stance")?
            .to_owned();
        Ok(Researched {
            verdict,
            supports,
            opposes,
        })
    }

    /// The annotators' sentences for a claim, by text, with their stances: the corpus folds
    /// identical texts under one id, so a hit is matched on what it says.
    fn annotated<'c>(&'c self, claim: &'c Claim) -> Vec<(&'c str, &'static str)> {
        let mut annotated: Vec<(&str, &'static str)> = Vec::new();
        for e in &claim.evidences {
            let text = self
                .text_of
                .get(e.evidence_id.as_str())
                .copied()
                .unwrap_or(e.evidence.as_str());
            if !text.is_empty() && !annotated.iter().any(|(t, _)| *t == text) {
                annotated.push((text, stance_of(&e.evidence_label)));
            }
        }
        annotated
    }

    /// Retrieval: searches with the claim and screens as a perfect screener would, adopting
    /// the hits the annotators tied to the claim with their stance.
    fn screen_retrieved(
        &self,
        task_id: &str,
        annotated: &[(&str, &'static str)],
    ) -> anyhow::Result<Vec<Value>> {
        let found = self.call(
            "retrieval_search_evidence",
            json!({"task_id": task_id, "limit": self.args.top}),
        )?;
        let mut decisions = Vec::new();
        for candidate in found["candidates"].as_array().into_iter().flatten() {
            if candidate["already_in_task"].as_bool() == Some(true) {
                continue;
            }
            let evidence_id = candidate["evidence_id"]
                .as_str()
                .context("a candidate has no evidence_id")?;
            let result_id = candidate["result_id"].as_str().unwrap_or_default();
            let text = self.text_of.get(result_id).copied().unwrap_or_default();
            decisions.push(match annotated.iter().find(|(t, _)| *t == text) {
                Some((_, stance)) => {
                    json!({"evidence_id": evidence_id, "adopt": true, "stance": stance})
                }
                None => json!({"evidence_id": evidence_id, "adopt": false}),
            });
        }
        Ok(decisions)
    }

    /// Oracle: the annotated sentences added as the client's evidence, dated by default, each
    /// to be adopted with its stance.
    fn add_annotated(
        &self,
        task_id: &str,
        annotated: &[(&str, &'static str)],
    ) -> anyhow::Result<Vec<Value>> {
        let mut decisions = Vec::new();
        for (text, stance) in annotated {
            let added = self.call(
                "retrieval_add_evidence",
                json!({
                    "task_id": task_id,
                    "source": "en.wikipedia.org",
                    "publish_date": self.args.default_publish_date.to_string(),
                    "publish_date_defaulted": true,
                    "source_type": "other",
                    "content": text,
                    "stance": stance,
                }),
            )?;
            let evidence_id = added["evidence_id"]
                .as_str()
                .context("retrieval_add_evidence gave no evidence_id")?;
            decisions.push(json!({"evidence_id": evidence_id, "adopt": true, "stance": stance}));
        }
        Ok(decisions)
    }
}

fn print_report(r: &Report) {
    say!(
        "decisions: {} Climate-FEVER claims (sample {}, from line {}; {}), evidence dated {} by default, today {}, top {}",
        r.claims,
        r.sample,
        r.first_line,
        r.labels_in_sample
            .iter()
            .map(|(l, n)| format!("{n} {l}"))
            .collect::<Vec<_>>()
            .join(", "),
        r.default_publish_date,
        r.today,
        r.top
    );
    say!("search: {}", r.ranking);
    say!();
    say!("rule set  mode       research date  agreement  ceiling");
    for run in &r.runs {
        say!(
            "{:<9} {:<10} {:<14} {:>9.3}  {}",
            run.rule_set,
            format!("{:?}", run.mode).to_lowercase(),
            run.research_date,
            run.agreement,
            run.ceiling.map_or("-".to_owned(), |c| format!("{c:>7.3}"))
        );
    }
    say!();
    for s in &r.date_sensitivity {
        say!(
            "{} {}: {:.3} of verdicts change when only the research date moves",
            s["rule_set"].as_str().unwrap_or_default(),
            s["mode"].as_str().unwrap_or_default(),
            s["verdicts_changed"].as_f64().unwrap_or_default()
        );
    }
    for run in &r.runs {
        say!();
        say!(
            "{} {} at {}: rows are labels, columns verdicts",
            run.rule_set,
            format!("{:?}", run.mode).to_lowercase(),
            run.research_date
        );
        say!(
            "{:<16}{}",
            "",
            VERDICTS
                .iter()
                .map(|v| format!("{v:>22}"))
                .collect::<String>()
        );
        for (label, row) in LABELS.iter().zip(&run.confusion) {
            say!(
                "{label:<16}{}",
                row.iter().map(|n| format!("{n:>22}")).collect::<String>()
            );
        }
    }
}
