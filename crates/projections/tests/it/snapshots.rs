//! Snapshots: used when the ledger confirms them, discarded and rebuilt when it does not, on the
//! in-memory and the embedded ledger.

use std::path::Path;

use projections::{OpenStart, Projector, TravelStart};
use research::Command;
use research::rules::{Mode, Stance};

use crate::support::*;

/// Three tasks with some history each.
fn three_tasks(world: &mut World) {
    for (i, task) in ["alpha", "beta", "gamma"].into_iter().enumerate() {
        world.ok(
            task,
            open_task(task, &format!("Question {task}?"), &[], Mode::AgentLed),
        );
        world.ok(
            task,
            add(vec![
                item(
                    "a.example.org",
                    "blog",
                    "2025-06-01",
                    Some(Stance::Supports),
                ),
                item(
                    "b.example.gov",
                    "government",
                    "2025-05-01",
                    Some(Stance::Opposes),
                ),
            ]),
        );
        if i != 1 {
            conclude(world, task);
        }
        world.tool_call(i as u8);
    }
}

/// Opens the projector's sled database directly, as damage or an older build would leave it.
/// sled lets go of its file lock from a background thread after the projector that held it is
/// dropped, so the lock is waited for, briefly, as the projector itself does.
fn with_db(dir: &Path, change: impl FnOnce(&sled::Db)) {
    let mut attempts = 0;
    let db = loop {
        match sled::open(dir) {
            Ok(db) => break db,
            Err(sled::Error::Io(e))
                if e.to_string().contains("could not acquire lock") && attempts < 250 =>
            {
                attempts += 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(e) => panic!("cannot open the snapshot database: {e}"),
        }
    };
    change(&db);
    db.flush().unwrap();
}

/// The snapshot keys of one task, oldest first.
fn keys_of(db: &sled::Db, task: &str) -> Vec<sled::IVec> {
    db.scan_prefix(b"s")
        .keys()
        .map(Result::unwrap)
        .filter(|k| &k[3..k.len() - 8] == task.as_bytes())
        .collect()
}

/// The key of a task's index entry.
fn entry_key_of(task: &str) -> Vec<u8> {
    let mut key = vec![b'e'];
    key.extend_from_slice(&(task.len() as u16).to_be_bytes());
    key.extend_from_slice(task.as_bytes());
    key
}

fn assert_same_as_rebuild(projector: &Projector, world: &World) {
    let rebuilt = projector_of(world);
    assert_eq!(projector.projection_hash(), rebuilt.projection_hash());
    assert_eq!(projector.lag(), 0);
}

fn projector_of(world: &World) -> Projector {
    projector(&world.ledger)
}

#[test]
fn a_corrupt_snapshot_is_discarded_and_its_task_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = memory_ledger(41);
    let mut world = World::new(&ledger);
    three_tasks(&mut world);
    {
        let first = projector_in(&ledger, dir.path());
        assert!(matches!(first.open_report().start, OpenStart::Empty));
        assert!(
            first
                .open_report()
                .snapshot
                .is_some_and(|s| s.tasks_written == 3)
        );
    }
    with_db(dir.path(), |db| {
        let key = keys_of(db, "beta").pop().unwrap();
        let mut value = db.get(&key).unwrap().unwrap().to_vec();
        let middle = value.len() / 2;
        value[middle] ^= 0x5a;
        db.insert(&key, value).unwrap();
    });
    let reopened = projector_in(&ledger, dir.path());
    let report = reopened.open_report().clone();
    assert!(
        matches!(report.start, OpenStart::Snapshots { tasks: 3, .. }),
        "{report:?}"
    );
    // States are checked when they are loaded, not at open.
    assert!(report.discarded.is_empty(), "{report:?}");
    assert!(reopened.discarded().is_empty());
    // The state is rebuilt from the ledger when first read, and is the one a fold from
    // scratch gives.
    assert_eq!(
        reopened.state("beta").unwrap().canonical_bytes(),
        projector_of(&world)
            .state("beta")
            .unwrap()
            .canonical_bytes()
    );
    let discarded = reopened.discarded();
    assert_eq!(discarded.len(), 1, "{discarded:?}");
    assert_eq!(discarded[0].task_id.as_deref(), Some("beta"));
    assert_same_as_rebuild(&reopened, &world);
    // Discarded means removed: the next open finds nothing wrong.
    drop(reopened);
    let again = projector_in(&ledger, dir.path());
    assert_same_as_rebuild(&again, &world);
    assert!(again.discarded().is_empty(), "{:?}", again.discarded());
}

#[test]
fn a_lost_newest_snapshot_falls_back_to_an_older_one_and_folds_forward() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = memory_ledger(42);
    let mut world = World::new(&ledger);
    three_tasks(&mut world);
    {
        let first = projector_in(&ledger, dir.path());
        world.ok("beta", Command::RunConflictResolution);
        world.ok("beta", Command::BuildDecisionMatrix);
        first.catch_up().unwrap();
        let round = first.snapshot().unwrap();
        assert_eq!(round.tasks_written, 1);
    }
    with_db(dir.path(), |db| {
        let keys = keys_of(db, "beta");
        assert_eq!(keys.len(), 2);
        db.remove(keys.last().unwrap()).unwrap();
    });
    let reopened = projector_in(&ledger, dir.path());
    let report = reopened.open_report();
    assert!(report.discarded.is_empty());
    // Beta's state now comes from the older snapshot, folded forward along its stream.
    assert_same_as_rebuild(&reopened, &world);
    assert!(reopened.discarded().is_empty());
}

#[test]
fn snapshots_of_another_ledger_format_or_size_mean_a_full_rebuild() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = memory_ledger(43);
    let mut world = World::new(&ledger);
    three_tasks(&mut world);
    drop(projector_in(&ledger, dir.path()));

    // Another ledger, as long or longer: its event at the manifest's seq differs.
    let other = memory_ledger(44);
    let mut other_world = World::new(&other);
    three_tasks(&mut other_world);
    other_world.ok(
        "delta",
        open_task("delta", "More?", &[], Mode::ToolConstrained),
    );
    let p = projector_in(&other, dir.path());
    assert!(
        matches!(&p.open_report().start, OpenStart::FullRebuild { reason } if reason.contains("another ledger")),
        "{:?}",
        p.open_report().start
    );
    assert_same_as_rebuild(&p, &other_world);
    drop(p);

    // A shorter ledger than the snapshots cover.
    let short = memory_ledger(45);
    let mut short_world = World::new(&short);
    short_world.ok(
        "solo",
        open_task("solo", "Alone?", &[], Mode::ToolConstrained),
    );
    let p = projector_in(&short, dir.path());
    assert!(matches!(
        &p.open_report().start,
        OpenStart::FullRebuild { .. }
    ));
    assert_same_as_rebuild(&p, &short_world);
    drop(p);

    // A format this build does not write.
    with_db(dir.path(), |db| {
        db.insert(
            b"format",
            b"research-ledger/projections/snapshots/v0".to_vec(),
        )
        .unwrap();
    });
    let p = projector_in(&short, dir.path());
    assert!(
        matches!(&p.open_report().start, OpenStart::FullRebuild { reason } if reason.contains("format")),
        "{:?}",
        p.open_report().start
    );
    drop(p);

    // A task missing altogether: the manifest counts it.
    let p = projector_in(&ledger, dir.path());
    drop(p);
    with_db(dir.path(), |db| {
        for key in keys_of(db, "gamma") {
            db.remove(key).unwrap();
        }
        db.remove(entry_key_of("gamma")).unwrap();
    });
    let p = projector_in(&ledger, dir.path());
    assert!(
        matches!(&p.open_report().start, OpenStart::FullRebuild { reason } if reason.contains("manifest")),
        "{:?}",
        p.open_report().start
    );
    assert_same_as_rebuild(&p, &world);
}

#[test]
fn time_travel_starts_from_the_nearest_snapshot_at_or_below() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = memory_ledger(46);
    let mut world = World::new(&ledger);
    let p = projector_in(&ledger, dir.path());
    world.ok("t", open_task("t", "Q?", &[], Mode::AgentLed));
    for i in 0..4u8 {
        world.ok("t", tool_call_command(i));
    }
    p.catch_up().unwrap();
    p.snapshot().unwrap();
    for i in 4..9u8 {
        world.ok("t", tool_call_command(i));
    }
    p.catch_up().unwrap();
    let events = events_of(&ledger, "t");
    assert_eq!(events.len(), 10);

    let at7 = p.time_travel("t", 7).unwrap();
    assert!(matches!(at7.start, TravelStart::Snapshot { version: 5, seq } if seq == events[4].seq));
    assert_eq!(at7.events_folded, 2);
    assert_eq!(
        at7.state.canonical_bytes(),
        fold_prefix(&events, 7).canonical_bytes()
    );
    let at3 = p.time_travel("t", 3).unwrap();
    assert!(matches!(at3.start, TravelStart::Scratch));
    assert_eq!(at3.events_folded, 3);
    let head = p.time_travel("t", 10).unwrap();
    assert!(matches!(head.start, TravelStart::Live));
    assert_eq!(head.events_folded, 0);
    assert_eq!(p.state_at("t", 0).unwrap().version(), 0);
}

#[test]
fn the_embedded_ledger_reopens_with_its_snapshots() {
    let dir = tempfile::tempdir().unwrap();
    let ledger_dir = dir.path().join("ledger");
    let snapshot_dir = dir.path().join("projections");
    let (expected, versions) = {
        let ledger = embedded_ledger(&ledger_dir);
        let mut world = World::new(&ledger);
        let p = projector_in(&ledger, &snapshot_dir);
        three_tasks(&mut world);
        p.catch_up().unwrap();
        p.snapshot().unwrap();
        world.ok("alpha", tool_call_command(9));
        world.ok(
            "beta",
            add(vec![item(
                "c.example.org",
                "blog",
                "2025-06-20",
                Some(Stance::Neutral),
            )]),
        );
        p.catch_up().unwrap();
        let expected = p.projection_hash();
        let versions: Vec<u64> = ["alpha", "beta", "gamma"]
            .iter()
            .map(|t| p.session_version(t).unwrap())
            .collect();
        drop(p);
        ledger.shutdown();
        (expected, versions)
    };
    let ledger = embedded_ledger(&ledger_dir);
    let p = projector_in(&ledger, &snapshot_dir);
    let report = p.open_report().clone();
    assert!(
        matches!(report.start, OpenStart::Snapshots { tasks: 3, .. }),
        "{report:?}"
    );
    assert!(report.discarded.is_empty());
    assert_eq!(report.events_caught_up, 2);
    assert_eq!(p.projection_hash(), expected);
    let rebuilt = projector(&ledger);
    assert_eq!(rebuilt.projection_hash(), expected);
    for (task, version) in ["alpha", "beta", "gamma"].iter().zip(versions) {
        assert_eq!(p.session_version(task).unwrap(), version);
        let events = events_of(&ledger, task);
        let travel = p.time_travel(task, version - 1).unwrap();
        // Alpha's and beta's snapshots are exactly one version behind their heads; gamma's is
        // at its head, so going back one starts from its first event.
        if *task == "gamma" {
            assert!(
                matches!(travel.start, TravelStart::Scratch),
                "{:?}",
                travel.start
            );
        } else {
            assert!(
                matches!(travel.start, TravelStart::Snapshot { version: v, .. } if v == version - 1),
                "{task}: {:?}",
                travel.start
            );
            assert_eq!(travel.events_folded, 0);
        }
        assert_eq!(
            travel.state.canonical_bytes(),
            fold_prefix(&events, version as usize - 1).canonical_bytes()
        );
    }
    // A rebuild on demand agrees with what was loaded, and writes fresh snapshots.
    let report = p.rebuild().unwrap();
    assert!(report.matched);
    assert!(report.snapshot.is_some_and(|s| s.tasks_written == 3));
}
