//! A writer process killed with SIGKILL in the middle of appending loses nothing it
//! acknowledged, and the chain it leaves verifies.
//!
//! The test binary runs itself as the writer (the `child_writer` test, which does nothing
//! unless `LEDGER_CRASH_CHILD` names a directory). The child prints a line for every append
//! it has been told is durable; the parent kills it at a seeded random moment, reopens the
//! ledger, and checks every printed event is there with the printed hash. Several rounds run
//! on the same directory, so recovery is also tested on a log that was itself recovered.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use ledger::storage::memory::SplitMix64;
use ledger::{Digest, ExpectedVersion, Ledger, LedgerOptions};

use super::{keyed, request};

const CHILD_ENV: &str = "LEDGER_CRASH_CHILD";

#[test]
fn child_writer() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let round: u32 = std::env::var("LEDGER_CRASH_ROUND")
        .unwrap()
        .parse()
        .unwrap();
    let ledger = Ledger::open(std::path::Path::new(&dir), LedgerOptions::default()).unwrap();
    let out = std::sync::Mutex::new(std::io::stdout());
    std::thread::scope(|scope| {
        for t in 0..4 {
            let ledger = ledger.clone();
            let out = &out;
            scope.spawn(move || {
                for i in 0.. {
                    let stream = format!("task-{}", (t + i) % 6);
                    let payload = vec![(i % 251) as u8; 300];
                    let key = format!("r{round}-t{t}-{i}");
                    let receipt = ledger
                        .append(keyed(
                            request(&stream, ExpectedVersion::Any, &[&payload]),
                            &key,
                        ))
                        .unwrap();
                    let e = &receipt.events[0];
                    let mut out = out.lock().unwrap();
                    writeln!(out, "ack {} {} {}", key, e.seq, e.hash).unwrap();
                    out.flush().unwrap();
                }
            });
        }
    });
}

#[test]
fn sigkill_mid_stream_loses_no_acknowledged_event() {
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let seed: u64 = std::env::var("LEDGER_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0xC0FFEE);
    eprintln!("crash test seed {seed} (set LEDGER_CRASH_SEED to replay)");
    let mut rng = SplitMix64::new(seed);
    let mut acked: Vec<(String, u64, Digest)> = Vec::new();
    for round in 0..5 {
        let kill_after = 50 + rng.below(400) as usize;
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "crash::child_writer",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env(CHILD_ENV, dir.path())
            .env("LEDGER_CRASH_ROUND", round.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let mut seen = 0;
        while seen < kill_after {
            let Some(line) = lines.next() else { break };
            let line = line.unwrap();
            let mut parts = line.split_whitespace();
            if parts.next() != Some("ack") {
                continue;
            }
            let key = parts.next().unwrap().to_owned();
            let seq: u64 = parts.next().unwrap().parse().unwrap();
            let hash: Digest = parts.next().unwrap().parse().unwrap();
            acked.push((key, seq, hash));
            seen += 1;
        }
        assert_eq!(
            seen, kill_after,
            "the writer stopped on its own in round {round}"
        );
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();

        let ledger = Ledger::open(dir.path(), LedgerOptions::default()).unwrap();
        assert!(ledger.poisoned().is_none(), "{:?}", ledger.poisoned());
        for (key, seq, hash) in &acked {
            let event = ledger
                .get(*seq)
                .unwrap()
                .unwrap_or_else(|| panic!("acknowledged seq {seq} ({key}) is gone (seed {seed})"));
            assert_eq!(
                event.hash, *hash,
                "acknowledged seq {seq} changed (seed {seed})"
            );
        }
        let report = ledger.verify_from_scratch(&mut |_, _| {});
        assert!(report.is_intact(), "seed {seed}: {report:?}");
        assert!(report.size >= acked.len() as u64);
        // A retry of an acknowledged command after the crash returns its original events.
        let (key, seq, hash) = acked.last().unwrap();
        let event = ledger.get(*seq).unwrap().unwrap();
        let retry = ledger
            .append(keyed(
                request(&event.stream, ExpectedVersion::Any, &[&event.payload]),
                key,
            ))
            .unwrap();
        assert!(retry.replayed, "seed {seed}: retry of {key} wrote again");
        assert_eq!(retry.events[0].hash, *hash);
    }
}
