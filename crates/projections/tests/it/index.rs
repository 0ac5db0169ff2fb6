//! The task index: filters by status, stance and text (English and Chinese), and cursor
//! pagination across page boundaries.

use projections::{QueryError, TaskPage, TaskQuery};
use research::TaskStatus;
use research::rules::{Mode, Stance, Verdict};

use crate::support::*;

/// Six tasks, opened in this order: one of each status, two concluded with opposite stances,
/// one asked in Chinese.
fn six_tasks() -> (World, projections::Projector) {
    let ledger = memory_ledger(11);
    let mut world = World::new(&ledger);
    world.ok(
        "lithium",
        open_task(
            "lithium",
            "Does LITHIUM demand grow faster than supply?",
            &["Public   industry data only"],
            Mode::ToolConstrained,
        ),
    );
    for (task, stance) in [("copper", Stance::Supports), ("nickel", Stance::Supports)] {
        world.ok(
            task,
            open_task(
                task,
                &format!("Will {task} prices rise?"),
                &[],
                Mode::ToolConstrained,
            ),
        );
        world.ok(
            task,
            add(vec![
                item("a.example.gov", "government", "2025-06-01", Some(stance)),
                item("b.example.gov", "government", "2025-05-01", Some(stance)),
                item("c.example.gov", "government", "2025-04-01", Some(stance)),
            ]),
        );
        conclude(&mut world, task);
    }
    // New evidence after the conclusion makes nickel's stale.
    world.ok(
        "nickel",
        add(vec![item(
            "d.example.org",
            "blog",
            "2025-06-20",
            Some(Stance::Opposes),
        )]),
    );
    world.ok(
        "cobalt",
        open_task(
            "cobalt",
            "Is cobalt mining expanding?",
            &[],
            Mode::ToolConstrained,
        ),
    );
    world.ok("cobalt", close());
    world.ok(
        "zinc",
        open_task("zinc", "Is zinc demand falling?", &[], Mode::AgentLed),
    );
    world.ok(
        "zinc",
        add(vec![
            item(
                "a.example.gov",
                "government",
                "2025-06-01",
                Some(Stance::Opposes),
            ),
            item(
                "b.example.gov",
                "government",
                "2025-05-01",
                Some(Stance::Opposes),
            ),
            item(
                "c.example.gov",
                "government",
                "2025-04-01",
                Some(Stance::Opposes),
            ),
        ]),
    );
    conclude(&mut world, "zinc");
    world.ok(
        "li-cn",
        open_task(
            "li-cn",
            "锂需求的增长是否快于供应？",
            &["仅限公开的行业数据"],
            Mode::ToolConstrained,
        ),
    );
    let projector = projector(&ledger);
    (world, projector)
}

fn ids(page: &TaskPage) -> Vec<&str> {
    page.tasks.iter().map(|t| t.task_id.as_str()).collect()
}

fn query() -> TaskQuery {
    TaskQuery::default()
}

#[test]
fn the_listing_says_what_each_task_is() {
    let (_, projector) = six_tasks();
    let page = projector.tasks(&query()).unwrap();
    assert_eq!(
        ids(&page),
        ["lithium", "copper", "nickel", "cobalt", "zinc", "li-cn"]
    );
    assert_eq!(page.next_cursor, None);
    let statuses: Vec<TaskStatus> = page.tasks.iter().map(|t| t.status).collect();
    assert_eq!(
        statuses,
        [
            TaskStatus::Active,
            TaskStatus::Concluded,
            TaskStatus::Stale,
            TaskStatus::Closed,
            TaskStatus::Concluded,
            TaskStatus::Active
        ]
    );
    let copper = &page.tasks[1];
    assert_eq!(copper.stance, Some(Verdict::Supportive));
    assert!(copper.confidence.is_some_and(|c| c >= 0.5));
    assert_eq!(copper.version, projector.session_version("copper").unwrap());
    assert_eq!(page.tasks[4].stance, Some(Verdict::Opposing));
    assert_eq!(page.tasks[0].stance, None);
    // Listed in the order opened, which is the order of their first events.
    assert!(
        page.tasks
            .windows(2)
            .all(|w| w[0].first_seq < w[1].first_seq)
    );
    assert!(page.tasks.iter().all(|t| t.last_seq >= t.first_seq));
}

#[test]
fn filters_by_status_stance_and_text() {
    let (_, projector) = six_tasks();
    let by_status = |status| {
        projector
            .tasks(&TaskQuery {
                status: Some(status),
                ..query()
            })
            .unwrap()
    };
    assert_eq!(ids(&by_status(TaskStatus::Active)), ["lithium", "li-cn"]);
    assert_eq!(ids(&by_status(TaskStatus::Concluded)), ["copper", "zinc"]);
    assert_eq!(ids(&by_status(TaskStatus::Stale)), ["nickel"]);
    assert_eq!(ids(&by_status(TaskStatus::Closed)), ["cobalt"]);

    let by_stance = |stance| {
        projector
            .tasks(&TaskQuery {
                stance: Some(stance),
                ..query()
            })
            .unwrap()
    };
    // The current conclusion's stance, stale ones included.
    assert_eq!(ids(&by_stance(Verdict::Supportive)), ["copper", "nickel"]);
    assert_eq!(ids(&by_stance(Verdict::Opposing)), ["zinc"]);
    assert!(by_stance(Verdict::Uncertain).tasks.is_empty());

    let by_text = |text: &str| {
        projector
            .tasks(&TaskQuery {
                text: Some(text.into()),
                ..query()
            })
            .unwrap()
    };
    assert_eq!(ids(&by_text("lithium")), ["lithium"]);
    assert_eq!(ids(&by_text("  Lithium DEMAND ")), ["lithium"]);
    // Constraints are searched too, whatever the spacing.
    assert_eq!(ids(&by_text("industry data")), ["lithium"]);
    assert_eq!(ids(&by_text("锂需求")), ["li-cn"]);
    assert_eq!(ids(&by_text("行业数据")), ["li-cn"]);
    assert_eq!(ids(&by_text("prices rise")), ["copper", "nickel"]);
    assert!(by_text("uranium").tasks.is_empty());
    // A filter that spans the question and a constraint matches neither.
    assert!(by_text("supply? public").tasks.is_empty());
    // Filters combine.
    let combined = projector
        .tasks(&TaskQuery {
            status: Some(TaskStatus::Concluded),
            stance: Some(Verdict::Supportive),
            text: Some("PRICES".into()),
            ..query()
        })
        .unwrap();
    assert_eq!(ids(&combined), ["copper"]);
}

#[test]
fn pages_continue_across_boundaries_with_opaque_cursors() {
    let (mut world, projector) = six_tasks();
    let page = |after: Option<String>, limit| {
        projector
            .tasks(&TaskQuery {
                after,
                limit: Some(limit),
                ..query()
            })
            .unwrap()
    };
    let first = page(None, 4);
    assert_eq!(ids(&first), ["lithium", "copper", "nickel", "cobalt"]);
    let cursor = first.next_cursor.clone().unwrap();
    assert_eq!(Some(&cursor), first.tasks.last().map(|t| &t.cursor));

    // A task opened between two pages appears at the end, never shifting the next page.
    world.ok(
        "tin",
        open_task("tin", "Is tin scarce?", &[], Mode::ToolConstrained),
    );
    projector.catch_up().unwrap();
    let second = page(Some(cursor), 2);
    assert_eq!(ids(&second), ["zinc", "li-cn"]);
    let third = page(second.next_cursor.clone(), 2);
    assert_eq!(ids(&third), ["tin"]);
    assert_eq!(third.next_cursor, None);

    // A page exactly as long as what is left has no next cursor.
    let exact = page(None, 7);
    assert_eq!(exact.tasks.len(), 7);
    assert_eq!(exact.next_cursor, None);

    // Filtered pages continue across the boundary too.
    let active = |after: Option<String>| {
        projector
            .tasks(&TaskQuery {
                status: Some(TaskStatus::Active),
                after,
                limit: Some(1),
                ..query()
            })
            .unwrap()
    };
    let one = active(None);
    assert_eq!(ids(&one), ["lithium"]);
    let two = active(one.next_cursor.clone());
    assert_eq!(ids(&two), ["li-cn"]);
    let three = active(two.next_cursor.clone());
    assert_eq!(ids(&three), ["tin"]);
    assert_eq!(three.next_cursor, None);
}

#[test]
fn bad_pages_are_refused_with_what_is_wrong() {
    let (_, projector) = six_tasks();
    let max = projector.limits().page_tasks_max;
    assert!(matches!(
        projector.tasks(&TaskQuery {
            limit: Some(max + 1),
            ..query()
        }),
        Err(QueryError::LimitExceeded { limit: "page_tasks_max", max: m, requested }) if m == max as u64 && requested == max as u64 + 1
    ));
    assert!(matches!(
        projector.tasks(&TaskQuery {
            limit: Some(0),
            ..query()
        }),
        Err(QueryError::InvalidArgument { field: "limit", .. })
    ));
    assert!(matches!(
        projector.tasks(&TaskQuery {
            after: Some("not-a-cursor".into()),
            ..query()
        }),
        Err(QueryError::InvalidCursor { .. })
    ));
    let long = "长".repeat(projector.limits().text_filter_chars_max + 1);
    assert!(matches!(
        projector.tasks(&TaskQuery {
            text: Some(long),
            ..query()
        }),
        Err(QueryError::LimitExceeded {
            limit: "text_filter_chars_max",
            ..
        })
    ));
    // The default page is bounded by its own limit.
    let page = projector.tasks(&query()).unwrap();
    assert!(page.tasks.len() <= projector.limits().page_tasks_default);
}
