//! The ledger benchmark's report: one structure printed either as text for a person or as one
//! JSON object for a script, so the two can never say different things.
//!
//! Field names are the JSON keys; a [`Ratio`] names its figure and baseline by those keys, so a
//! reader can recompute every ratio from the figures beside it.

use std::fmt::Write as _;

use serde::Serialize;

use super::checkpoint_reads::CheckpointReads;

/// Everything one run measured.
#[derive(Debug, Clone, Serialize)]
pub(super) struct Report {
    /// Which harness produced it.
    pub(super) bench: &'static str,
    pub(super) parameters: Parameters,
    pub(super) figures: Figures,
    pub(super) baselines: Baselines,
    pub(super) ratios: Vec<Ratio>,
    pub(super) group_commit: GroupCommit,
    /// The reads that serve checkpoints, on a short checkpoint log and on a long one.
    pub(super) checkpoint_reads: CheckpointReads,
    pub(super) notes: Vec<String>,
}

/// What was run.
#[derive(Debug, Clone, Serialize)]
pub(super) struct Parameters {
    /// Payload of every event.
    pub(super) payload_bytes: usize,
    /// Mean stored size of an event (envelope, payload and hash), read from the log; the
    /// sled baselines insert values of this size.
    pub(super) stored_event_bytes: f64,
    /// Appends by the single writer, each of one event.
    pub(super) sequential_appends: u64,
    /// Appends by the concurrent writers together, each of one event.
    pub(super) concurrent_appends: u64,
    /// Concurrent writer threads.
    pub(super) writers: usize,
    /// The appends and their baselines run in this many alternating rounds, so that whatever
    /// else the machine does falls on both alike.
    pub(super) append_rounds: usize,
    /// Which streams the concurrent writers append to.
    pub(super) streams: &'static str,
    /// The expected version every append gives.
    pub(super) expected_version: &'static str,
    /// Events in the ledger when it is replayed.
    pub(super) replayed_events: u64,
    /// Times the ledger was reopened and replayed; the median round is reported.
    pub(super) replay_rounds: usize,
    /// Inclusion proofs generated and verified.
    pub(super) proofs: u64,
    /// Tree size of the checkpoint the proofs are against.
    pub(super) checkpoint_tree_size: u64,
    /// Where the run wrote.
    pub(super) dir: String,
    /// Whether what it wrote is left there.
    pub(super) dir_kept: bool,
}

/// The ledger's figures, each per second.
#[derive(Debug, Clone, Serialize)]
pub(super) struct Figures {
    pub(super) durable_appends_1_writer_per_s: f64,
    pub(super) durable_appends_concurrent_per_s: f64,
    pub(super) replay_verify_events_per_s: f64,
    pub(super) replay_events_per_s: f64,
    pub(super) inclusion_proofs_generated_per_s: f64,
    pub(super) inclusion_proofs_verified_per_s: f64,
}

/// The raw baselines, each per second.
#[derive(Debug, Clone, Serialize)]
pub(super) struct Baselines {
    pub(super) file_sync_each_appends_per_s: f64,
    pub(super) file_sync_grouped_appends_per_s: f64,
    pub(super) sled_sync_each_inserts_per_s: f64,
    pub(super) sled_sync_grouped_inserts_per_s: f64,
    pub(super) blake3_hashes_per_s: f64,
    /// SHA-256 of 65-byte messages, the size of a Merkle node's input.
    pub(super) sha256_node_hashes_per_s: f64,
}

/// One ledger figure divided by its baseline.
#[derive(Debug, Clone, Serialize)]
pub(super) struct Ratio {
    /// Key of the figure in `figures`.
    pub(super) figure: &'static str,
    /// Key of the baseline in `baselines`.
    pub(super) baseline: &'static str,
    /// `figure / baseline`.
    pub(super) ratio: f64,
    /// The ratio the product aims for, where it has one.
    pub(super) target: Option<f64>,
}

impl Figures {
    /// Every figure by its JSON key.
    fn named(&self) -> [(&'static str, f64); 6] {
        [
            (
                "durable_appends_1_writer_per_s",
                self.durable_appends_1_writer_per_s,
            ),
            (
                "durable_appends_concurrent_per_s",
                self.durable_appends_concurrent_per_s,
            ),
            (
                "replay_verify_events_per_s",
                self.replay_verify_events_per_s,
            ),
            ("replay_events_per_s", self.replay_events_per_s),
            (
                "inclusion_proofs_generated_per_s",
                self.inclusion_proofs_generated_per_s,
            ),
            (
                "inclusion_proofs_verified_per_s",
                self.inclusion_proofs_verified_per_s,
            ),
        ]
    }
}

impl Baselines {
    /// Every baseline by its JSON key.
    fn named(&self) -> [(&'static str, f64); 6] {
        [
            (
                "file_sync_each_appends_per_s",
                self.file_sync_each_appends_per_s,
            ),
            (
                "file_sync_grouped_appends_per_s",
                self.file_sync_grouped_appends_per_s,
            ),
            (
                "sled_sync_each_inserts_per_s",
                self.sled_sync_each_inserts_per_s,
            ),
            (
                "sled_sync_grouped_inserts_per_s",
                self.sled_sync_grouped_inserts_per_s,
            ),
            ("blake3_hashes_per_s", self.blake3_hashes_per_s),
            ("sha256_node_hashes_per_s", self.sha256_node_hashes_per_s),
        ]
    }
}

impl Ratio {
    /// The ratios of `pairs` (figure key, baseline key, target), computed from the figures and
    /// baselines those keys name.
    pub(super) fn all(
        figures: &Figures,
        baselines: &Baselines,
        pairs: &[(&'static str, &'static str, Option<f64>)],
    ) -> anyhow::Result<Vec<Ratio>> {
        let find = |named: &[(&'static str, f64)], key: &str| {
            named
                .iter()
                .find(|(k, _)| *k == key)
                .map(|(_, v)| *v)
                .ok_or_else(|| anyhow::anyhow!("no figure or baseline is called {key}"))
        };
        pairs
            .iter()
            .map(|&(figure, baseline, target)| {
                Ok(Ratio {
                    figure,
                    baseline,
                    ratio: find(&figures.named(), figure)? / find(&baselines.named(), baseline)?,
                    target,
                })
            })
            .collect()
    }
}

/// How appends shared syncs, counted from the frames of the log.
#[derive(Debug, Clone, Serialize)]
pub(super) struct GroupCommit {
    pub(super) sequential: Syncs,
    pub(super) concurrent: Syncs,
    /// Time from calling `append` to its acknowledgement, over the concurrent appends.
    pub(super) concurrent_latency_ms: Latency,
    /// Entries written to the checkpoint log during the two append runs (each one more sync).
    pub(super) checkpoint_syncs: u64,
}

/// Syncs of the log during one run of appends.
#[derive(Debug, Clone, Serialize)]
pub(super) struct Syncs {
    pub(super) syncs: u64,
    pub(super) events: u64,
    pub(super) events_per_sync: f64,
    pub(super) largest: u64,
}

/// Latency quantiles in milliseconds.
#[derive(Debug, Clone, Serialize)]
pub(super) struct Latency {
    pub(super) p50: f64,
    pub(super) p99: f64,
    pub(super) max: f64,
}

impl Report {
    /// What a person calls a figure or baseline, by its key.
    fn label(&self, key: &str) -> String {
        match key {
            "durable_appends_1_writer_per_s" => "1 writer".into(),
            "durable_appends_concurrent_per_s" => format!("{} writers", self.parameters.writers),
            "replay_verify_events_per_s" => "replay + full verify".into(),
            "replay_events_per_s" => "plain replay".into(),
            "sled_sync_each_inserts_per_s" => "raw sled, 1 insert per sync".into(),
            "sled_sync_grouped_inserts_per_s" => "raw sled, the ledger's groups".into(),
            "file_sync_each_appends_per_s" => "raw file, 1 write per sync".into(),
            "file_sync_grouped_appends_per_s" => "raw file, the ledger's groups".into(),
            "blake3_hashes_per_s" => "raw blake3".into(),
            "sha256_node_hashes_per_s" => "raw SHA-256 of Merkle nodes".into(),
            other => other.into(),
        }
    }

    /// The reads that serve checkpoints, on the short log and the long one.
    fn checkpoint_read_lines(&self, out: &mut String) {
        let c = &self.checkpoint_reads;
        let _ = writeln!(
            out,
            "reads that serve checkpoints, on a checkpoint log of {} entries and of {} (written in {:.1} s)",
            count(c.short.entries),
            count(c.long.entries),
            c.written_secs
        );
        for (label, unit, short, long, ratio) in c.rows() {
            line(
                out,
                label,
                long,
                unit,
                &format!("{} on the short log: {ratio:.3}x", rate_text(short)),
            );
        }
    }

    /// The report as a person reads it.
    /// The replay figures and the hash rates they are measured against.
    fn replay_lines(&self, out: &mut String) {
        let (p, f, b) = (&self.parameters, &self.figures, &self.baselines);
        let _ = writeln!(
            out,
            "replay of a freshly reopened ledger ({} events, median of {} rounds)",
            count(p.replayed_events),
            p.replay_rounds
        );
        line(
            out,
            "replay + full verify",
            f.replay_verify_events_per_s,
            "events/s",
            "",
        );
        line(
            out,
            "plain replay (read_range, decode)",
            f.replay_events_per_s,
            "events/s",
            "",
        );
        line(
            out,
            &format!("raw blake3, {}-byte messages", p.payload_bytes),
            b.blake3_hashes_per_s,
            "hashes/s",
            "",
        );
        line(
            out,
            "raw SHA-256, 65-byte Merkle node inputs",
            b.sha256_node_hashes_per_s,
            "hashes/s",
            "",
        );
    }

    pub(super) fn to_text(&self) -> String {
        let p = &self.parameters;
        let f = &self.figures;
        let b = &self.baselines;
        let g = &self.group_commit;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "research-ledger bench ledger: {} events of {} payload bytes ({:.0} bytes stored each) in {}{}",
            count(p.replayed_events),
            p.payload_bytes,
            p.stored_event_bytes,
            p.dir,
            if p.dir_kept {
                ""
            } else {
                " (removed after the run)"
            }
        );
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "durable appends, 1 writer ({} appends in {} rounds, each acknowledged before the next)",
            count(p.sequential_appends),
            p.append_rounds
        );
        line(
            &mut out,
            "ledger",
            f.durable_appends_1_writer_per_s,
            "appends/s",
            &format!(
                "{} syncs, {:.2} events per sync",
                count(g.sequential.syncs),
                g.sequential.events_per_sync
            ),
        );
        line(
            &mut out,
            "raw file, write + fdatasync each",
            b.file_sync_each_appends_per_s,
            "writes/s",
            "",
        );
        line(
            &mut out,
            "raw sled, insert + flush + fsyncs each",
            b.sled_sync_each_inserts_per_s,
            "inserts/s",
            "",
        );
        let _ = writeln!(
            out,
            "durable appends, {} writers ({} appends in {} rounds, {})",
            p.writers,
            count(p.concurrent_appends),
            p.append_rounds,
            p.streams
        );
        line(
            &mut out,
            "ledger",
            f.durable_appends_concurrent_per_s,
            "appends/s",
            &format!(
                "{} syncs, {:.1} events per sync (largest {})",
                count(g.concurrent.syncs),
                g.concurrent.events_per_sync,
                g.concurrent.largest
            ),
        );
        let _ = writeln!(
            out,
            "{:66}append latency p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            "",
            g.concurrent_latency_ms.p50,
            g.concurrent_latency_ms.p99,
            g.concurrent_latency_ms.max
        );
        line(
            &mut out,
            "raw file, the same groups",
            b.file_sync_grouped_appends_per_s,
            "records/s",
            "",
        );
        line(
            &mut out,
            "raw sled, the same groups",
            b.sled_sync_grouped_inserts_per_s,
            "inserts/s",
            "",
        );
        self.replay_lines(&mut out);
        let _ = writeln!(
            out,
            "inclusion proofs ({} against a checkpoint of {} events)",
            count(p.proofs),
            count(p.checkpoint_tree_size)
        );
        line(
            &mut out,
            "generated",
            f.inclusion_proofs_generated_per_s,
            "proofs/s",
            "",
        );
        line(
            &mut out,
            "verified (verify_proof_file)",
            f.inclusion_proofs_verified_per_s,
            "proofs/s",
            "",
        );
        self.checkpoint_read_lines(&mut out);
        let _ = writeln!(out);
        let _ = writeln!(out, "ratios (ledger figure / baseline)");
        for r in &self.ratios {
            let label = format!("{} / {}", self.label(r.figure), self.label(r.baseline));
            let target = r
                .target
                .map_or(String::new(), |t| format!("  target {t:.2}"));
            let _ = writeln!(out, "  {label:<58}{:>6.2}{target}", r.ratio);
        }
        let _ = writeln!(out);
        let _ = writeln!(out, "notes");
        for note in &self.notes {
            let _ = writeln!(out, "  - {note}");
        }
        out
    }
}

/// One measurement: label, value, unit and a detail.
fn line(out: &mut String, label: &str, value: f64, unit: &str, detail: &str) {
    let text = format!("  {label:<40}{:>12} {unit:<10} {detail}", rate_text(value));
    // Trailing spaces are noise in a terminal and in a diff of two runs.
    let _ = writeln!(out, "{}", text.trim_end());
}

/// A rate as a person reads it: whole numbers with thousands separators, small ones with a
/// decimal.
fn rate_text(value: f64) -> String {
    if value < 100.0 {
        format!("{value:.1}")
    } else {
        count(value.round() as u64)
    }
}

/// A count with thousands separators.
fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_rates_read_as_a_person_writes_them() {
        assert_eq!(count(0), "0");
        assert_eq!(count(999), "999");
        assert_eq!(count(1_000), "1,000");
        assert_eq!(count(1_234_567), "1,234,567");
        assert_eq!(rate_text(12.345), "12.3");
        assert_eq!(rate_text(2_512_345.6), "2,512,346");
    }

    fn sample() -> (Figures, Baselines) {
        let figures = Figures {
            durable_appends_1_writer_per_s: 1.0,
            durable_appends_concurrent_per_s: 2.0,
            replay_verify_events_per_s: 3.0,
            replay_events_per_s: 4.0,
            inclusion_proofs_generated_per_s: 5.0,
            inclusion_proofs_verified_per_s: 6.0,
        };
        let baselines = Baselines {
            file_sync_each_appends_per_s: 10.0,
            file_sync_grouped_appends_per_s: 20.0,
            sled_sync_each_inserts_per_s: 30.0,
            sled_sync_grouped_inserts_per_s: 40.0,
            blake3_hashes_per_s: 12.0,
            sha256_node_hashes_per_s: 14.0,
        };
        (figures, baselines)
    }

    #[test]
    fn every_name_a_ratio_can_use_is_a_json_key_with_that_value() {
        let (figures, baselines) = sample();
        let json = serde_json::to_value(&figures).unwrap();
        assert_eq!(json.as_object().unwrap().len(), figures.named().len());
        for (key, value) in figures.named() {
            assert_eq!(json[key].as_f64(), Some(value), "{key}");
        }
        let json = serde_json::to_value(&baselines).unwrap();
        assert_eq!(json.as_object().unwrap().len(), baselines.named().len());
        for (key, value) in baselines.named() {
            assert_eq!(json[key].as_f64(), Some(value), "{key}");
        }
    }

    #[test]
    fn a_ratio_is_its_figure_over_its_baseline_and_an_unknown_name_is_refused() {
        let (figures, baselines) = sample();
        let ratios = Ratio::all(
            &figures,
            &baselines,
            &[(
                "replay_verify_events_per_s",
                "blake3_hashes_per_s",
                Some(0.25),
            )],
        )
        .unwrap();
        assert_eq!(ratios.len(), 1);
        assert_eq!(ratios[0].ratio, 0.25);
        assert_eq!(ratios[0].target, Some(0.25));
        let unknown_figure = [("nothing", "blake3_hashes_per_s", None)];
        assert!(Ratio::all(&figures, &baselines, &unknown_figure).is_err());
        let unknown_baseline = [("replay_events_per_s", "nothing", None)];
        assert!(Ratio::all(&figures, &baselines, &unknown_baseline).is_err());
    }
}
