//! Schedules across PostgreSQL replicas (SPEC section 23): one killed
//! (SIGKILL) and one frozen (SIGSTOP) while ticks fall due, and still one
//! run a tick, none lost. Ignored unless asked for, as `replicas`' tests.

use chrono::{DateTime, Duration, Utc};
use serde_json::json;

use crate::helpers::{eventually, require_postgres};
use crate::replicas::{Replica, ready, signal};
use crate::schedules::{id, quick, time};

/// The ticks of the runs a schedule made, oldest first, as `replica` lists
/// them.
async fn ticks_on(replica: &Replica, schedule: &str) -> Vec<DateTime<Utc>> {
    let listed = replica
        .server
        .get_json(&format!("/v1/runs?schedule_id={schedule}&limit=100"))
        .await;
    let mut ticks: Vec<DateTime<Utc>> = listed["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|run| time(&run["schedule_tick"]))
        .collect();
    ticks.sort();
    ticks
}

/// Waits until `replica` lists at least `n` more runs of the schedule than
/// `before`.
async fn more_ticks(replica: &Replica, schedule: &str, before: usize, n: usize) {
    eventually(&format!("{n} more ticks"), async || {
        (ticks_on(replica, schedule).await.len() >= before + n).then_some(())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs PostgreSQL: set AGENT_RUNNER_TEST_POSTGRES"]
async fn across_replicas_killed_and_frozen_each_tick_makes_exactly_one_run() {
    require_postgres();
    let dir = tempfile::tempdir().unwrap();
    let mut a = Replica::start(&dir, &[]);
    let b = Replica::start(&dir, &[]);
    let schedule = a
        .server
        .post_json(
            "/v1/schedules",
            // Every four seconds: a replica the suite's load holds up for
            // a second or two still looks before the next tick falls due
            // (ticks missed meanwhile are made up once, by the latest).
            &json!({"cron": "*/4 * * * * *", "run": quick()}),
        )
        .await;
    let schedule = id(&schedule).to_owned();
    more_ticks(&b, &schedule, 0, 2).await;

    // A killed: B goes on alone.
    a.kill();
    let seen = ticks_on(&b, &schedule).await.len();
    more_ticks(&b, &schedule, seen, 2).await;
    // A again; then B frozen: A goes on alone, and B, woken with whatever
    // it was doing, makes no tick a second time.
    let a = Replica::start(&dir, &[]);
    ready(&a).await;
    signal(&b, "STOP");
    let seen = ticks_on(&a, &schedule).await.len();
    more_ticks(&a, &schedule, seen, 3).await;
    signal(&b, "CONT");
    ready(&b).await;
    let seen = ticks_on(&a, &schedule).await.len();
    more_ticks(&a, &schedule, seen, 2).await;

    let disabled = a
        .server
        .client
        .patch(format!("{}/v1/schedules/{schedule}", a.server.address))
        .json(&json!({"enabled": false}))
        .send()
        .await
        .unwrap();
    assert_eq!(disabled.status(), 200);
    // Every run completes (one made on A as it was killed is taken over).
    let listed = eventually("every run of the schedule to end", async || {
        let listed = b
            .server
            .get_json(&format!("/v1/runs?schedule_id={schedule}&limit=100"))
            .await;
        let runs = listed["runs"].as_array().unwrap().clone();
        runs.iter()
            .all(|run| run["status"] == "completed")
            .then_some(runs)
    })
    .await;
    let ticks = ticks_on(&b, &schedule).await;
    assert_eq!(ticks.len(), listed.len());
    // No tick twice, and none lost: one run every four seconds, from the
    // first to the last.
    for pair in ticks.windows(2) {
        assert_eq!(pair[1] - pair[0], Duration::seconds(4), "ticks {:?}", ticks);
    }
    let read = b
        .server
        .get_json(&format!("/v1/schedules/{schedule}"))
        .await;
    assert_eq!(read["skipped_ticks"], 0);
    assert_eq!(read["refused_ticks"], 0);
}
