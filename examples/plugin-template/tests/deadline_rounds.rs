//! `deadline-rounds` driven event by event with fl-core's `RecordingContext`: no data, no
//! model, every action checked.

use fl_core::clock::ticks;
use fl_core::scheduler_testing::{Action, RecordingContext};
use fl_core::{FromConfig, Scheduler};
use fl_plugin_template::{DeadlineRounds, DeadlineRoundsConfig};

fn scheduler(rounds: u64) -> DeadlineRounds {
    DeadlineRounds::from_config(DeadlineRoundsConfig { rounds, deadline_s: 20.0, clients_per_round: 3 }).unwrap()
}

fn dispatched(actions: &[Action]) -> Vec<usize> {
    actions.iter().filter_map(|a| if let Action::Dispatch(c) = a { Some(*c) } else { None }).collect()
}

#[test]
fn each_deadline_aggregates_what_arrived_and_starts_idle_clients() {
    let mut ctx = RecordingContext::new(5, 1);
    let mut s = scheduler(2);
    s.on_start(&mut ctx).unwrap();
    let first = ctx.take_actions();
    let started = dispatched(&first);
    assert_eq!(started.len(), 3, "{first:?}");
    assert_eq!(first.last(), Some(&Action::Timer { at: ticks(20.0), tag: 0 }));

    // Two of the three arrive before the deadline; arrivals alone do nothing.
    for &c in &started[..2] {
        ctx.arrive(c);
        s.on_arrival(&mut ctx, c).unwrap();
    }
    assert!(ctx.take_actions().is_empty());

    // The deadline: the two arrived updates are aggregated, then 3 of the 4 idle clients
    // start (the late client is still training) and the next deadline is set.
    ctx.now = ticks(20.0);
    s.on_timer(&mut ctx, 0).unwrap();
    let second = ctx.take_actions();
    assert_eq!(second[0], Action::Aggregate { updates: 2 });
    let restarted = dispatched(&second);
    assert_eq!(restarted.len(), 3);
    assert!(!restarted.contains(&started[2]), "the late client is busy: {second:?}");
    assert_eq!(second.last(), Some(&Action::Timer { at: ticks(40.0), tag: 0 }));

    // The late update arrives and joins the second aggregation; after it the run stops.
    ctx.arrive(started[2]);
    s.on_arrival(&mut ctx, started[2]).unwrap();
    ctx.now = ticks(40.0);
    s.on_timer(&mut ctx, 0).unwrap();
    assert_eq!(ctx.take_actions(), [Action::Aggregate { updates: 1 }, Action::Stop]);
    assert_eq!(ctx.version, 2);
}

#[test]
fn a_deadline_with_nothing_arrived_moves_on_without_an_aggregation() {
    let mut ctx = RecordingContext::new(3, 2);
    let mut s = scheduler(5);
    s.on_start(&mut ctx).unwrap();
    ctx.take_actions();
    ctx.now = ticks(20.0);
    s.on_timer(&mut ctx, 0).unwrap();
    // Nobody arrived and every client is busy: no aggregation, no dispatch, only the timer.
    assert_eq!(ctx.take_actions(), [Action::Timer { at: ticks(40.0), tag: 0 }]);
    assert_eq!(ctx.version, 0);
}
