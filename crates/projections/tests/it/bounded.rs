//! The read models stay bounded: at most `task_states_cached_max` states are held, whatever the
//! number of tasks, and what is not held is loaded back — from a snapshot, or the ledger — to
//! exactly the state a fold from scratch gives.

use std::path::Path;

use ledger::Ledger;
use projections::{Projector, ProjectorOptions, TaskQuery};
use research::rules::{Mode, Stance};

use crate::support::*;

fn small_projector(ledger: &Ledger, dir: Option<&Path>, states: usize) -> Projector {
    let mut options = ProjectorOptions {
        snapshot_dir: dir.map(Path::to_path_buf),
        ..ProjectorOptions::default()
    };
    options.limits.task_states_cached_max = states;
    options.limits.snapshot_every_events = 0;
    Projector::open(ledger.clone(), options).unwrap()
}

/// Eight tasks, written to in turns so that every fold of one evicts another.
fn interleaved(world: &mut World, projector: &Projector) {
    let tasks: Vec<String> = (0..8).map(|i| format!("task-{i}")).collect();
    for task in &tasks {
        world.ok(
            task,
            open_task(task, &format!("Does {task} hold?"), &[], Mode::AgentLed),
        );
        projector.catch_up().unwrap();
    }
    for round in 0..3 {
        for (i, task) in tasks.iter().enumerate() {
            let stance = if (i + round) % 2 == 0 {
                Stance::Supports
            } else {
                Stance::Opposes
            };
            for event in world.ok(
                task,
                add(vec![item(
                    &format!("s{round}.example.org"),
                    "government",
                    "2025-05-01",
                    Some(stance),
                )]),
            ) {
                projector.apply(&event).unwrap();
            }
        }
    }
    for task in &tasks[..4] {
        conclude(world, task);
    }
    projector.catch_up().unwrap();
}

fn assert_same_as_scratch(projector: &Projector, ledger: &Ledger, states: usize) {
    let reference = fold_all(ledger);
    assert_eq!(reference.len(), 8);
    for (task, state) in &reference {
        assert_eq!(
            projector.state(task).unwrap().canonical_bytes(),
            state.canonical_bytes(),
            "{task}"
        );
        assert!(projector.status().states_held as usize <= states);
    }
    let page = projector
        .tasks(&TaskQuery {
            limit: Some(20),
            ..TaskQuery::default()
        })
        .unwrap();
    assert_eq!(page.tasks.len(), 8);
    for listing in &page.tasks {
        let state = &reference[&listing.task_id];
        assert_eq!(listing.version, state.version());
        assert_eq!(listing.status, state.status().unwrap());
        assert_eq!(
            listing.stance,
            state.current_conclusion().map(|c| c.issued.stance)
        );
    }
    assert_eq!(
        projector.projection_hash(),
        projector_of_scratch(ledger).projection_hash()
    );
}

fn projector_of_scratch(ledger: &Ledger) -> Projector {
    projector(ledger)
}

#[test]
fn without_snapshots_evicted_states_are_folded_again_from_the_ledger() {
    let ledger = memory_ledger(61);
    let mut world = World::new(&ledger);
    let p = small_projector(&ledger, None, 2);
    interleaved(&mut world, &p);
    assert!(p.status().states_held <= 2, "{:?}", p.status());
    assert_eq!(p.status().tasks, 8);
    assert_same_as_scratch(&p, &ledger, 2);
}

#[test]
fn with_snapshots_a_reopen_lists_every_task_without_loading_a_state() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = memory_ledger(62);
    let mut world = World::new(&ledger);
    {
        let p = small_projector(&ledger, Some(dir.path()), 3);
        interleaved(&mut world, &p);
        assert!(p.status().states_held <= 3);
        assert_same_as_scratch(&p, &ledger, 3);
        p.snapshot().unwrap();
    }
    let reopened = small_projector(&ledger, Some(dir.path()), 3);
    // The index comes from the entries written with the manifest: no state is loaded to list
    // the tasks.
    assert_eq!(reopened.status().states_held, 0);
    assert_eq!(
        reopened
            .tasks(&TaskQuery {
                limit: Some(20),
                ..TaskQuery::default()
            })
            .unwrap()
            .tasks
            .len(),
        8
    );
    assert_eq!(reopened.status().states_held, 0);
    assert_same_as_scratch(&reopened, &ledger, 3);
    assert!(
        reopened.discarded().is_empty(),
        "{:?}",
        reopened.discarded()
    );
}

/// Limits the read models cannot work with as given — a snapshot cache below the least its
/// database takes, a feed buffer too large to allocate — are brought to the nearest they can:
/// the projector opens, folds, snapshots and reopens from its snapshot.
#[test]
fn limits_past_what_the_read_models_can_use_are_brought_within_it() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = memory_ledger(63);
    let mut world = World::new(&ledger);
    let open = || {
        let mut options = ProjectorOptions {
            snapshot_dir: Some(dir.path().to_path_buf()),
            ..ProjectorOptions::default()
        };
        options.limits.snapshot_cache_bytes_max = 0;
        options.limits.feed_buffer_events = usize::MAX;
        Projector::open(ledger.clone(), options).unwrap()
    };
    {
        let p = open();
        interleaved(&mut world, &p);
        p.snapshot().unwrap();
    }
    let reopened = open();
    assert_eq!(reopened.status().tasks, 8);
    assert_same_as_scratch(&reopened, &ledger, 2048);
}
