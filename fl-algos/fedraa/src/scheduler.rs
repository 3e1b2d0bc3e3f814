//! `async-fragments`: Fed-RAA's scheduler (Algorithm 1 with an assignment rule). Every idle
//! client is given a fragment at once; each arrival is merged on its own, the fragment's
//! update count q(j) goes up, and the client gets its next fragment. With `policy =
//! "sync-rounds"` all clients train per round and one aggregation closes the round.
//!
//! The delays c_{n,j} Gre-RAA compares with K are the engine's own job durations (cost model,
//! no jitter), priced once at the start, so K is in virtual seconds; without `k` the bound is
//! the offline optimum K* of Theorem 2. Per-fragment update counts, the bound and the number
//! of fallbacks (no fragment within K) are logged with every evaluation.

use fl_core::{Error, InvalidKey, Result, SchedCtx, Scheduler, StateIn, StateOut, Validate};
use serde::{Deserialize, Serialize};
use smart_default::SmartDefault;

use crate::assignment::{Policy, gre_raa, min_priority, offline_k, random};

#[derive(Debug, Clone, PartialEq, SmartDefault, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AsyncFragmentsConfig {
    /// How an idle client's fragment is chosen.
    #[default(Policy::GreRaa)]
    pub policy: Policy,
    /// Gre-RAA's delay bound K in virtual seconds (absent: the offline optimum K*).
    #[default(None)]
    pub k: Option<f64>,
    /// Count in-flight assignments with the completed updates (the Fed-RAA code); the
    /// paper counts completed updates only. Always on for `sync-rounds`.
    #[default(false)]
    pub count_inflight: bool,
    /// Stop after this many aggregations: merges, or rounds for `sync-rounds`.
    #[default(1000)]
    pub aggregations: u64,
}

impl Validate for AsyncFragmentsConfig {
    fn validate(&self) -> std::result::Result<(), InvalidKey> {
        if self.k.is_some_and(|k| !(k > 0.0)) {
            return Err(InvalidKey::new(
                "k",
                format!("expected a positive number of virtual seconds, got {:?}", self.k),
            ));
        }
        if self.aggregations == 0 {
            return Err(InvalidKey::new("aggregations", "expected at least 1"));
        }
        Ok(())
    }
}

pub struct AsyncFragments {
    cfg: AsyncFragmentsConfig,
    /// c_{n,j}: client n's job duration on fragment j, virtual seconds.
    costs: Vec<Vec<f64>>,
    k: f64,
    /// q(j): merged updates of fragment j.
    updates: Vec<u64>,
    /// Assignments of fragment j not merged yet.
    in_flight: Vec<u64>,
    /// The fragment each client is training.
    assigned: Vec<Option<usize>>,
    fallbacks: u64,
    /// Arrivals still expected in the current round (`sync-rounds`).
    awaiting: usize,
}

impl AsyncFragments {
    pub fn new(cfg: AsyncFragmentsConfig) -> Self {
        AsyncFragments {
            cfg,
            costs: Vec::new(),
            k: 0.0,
            updates: Vec::new(),
            in_flight: Vec::new(),
            assigned: Vec::new(),
            fallbacks: 0,
            awaiting: 0,
        }
    }

    /// The delay bound in use (after `on_start`).
    pub fn k(&self) -> f64 {
        self.k
    }

    fn choose(&mut self, ctx: &mut SchedCtx, client: usize) -> usize {
        let counted: Vec<u64> = if self.cfg.count_inflight || self.cfg.policy == Policy::SyncRounds {
            self.updates.iter().zip(&self.in_flight).map(|(q, f)| q + f).collect()
        } else {
            self.updates.clone()
        };
        match self.cfg.policy {
            Policy::GreRaa | Policy::SyncRounds => {
                let (j, fallback) = gre_raa(&self.costs[client], self.k, &counted, ctx.rng());
                self.fallbacks += u64::from(fallback);
                j
            }
            Policy::Random => random(counted.len(), ctx.rng()),
            Policy::MinPriority => min_priority(&counted, ctx.rng()),
        }
    }

    fn dispatch(&mut self, ctx: &mut SchedCtx, client: usize) -> Result<()> {
        let j = self.choose(ctx, client);
        self.assigned[client] = Some(j);
        self.in_flight[j] += 1;
        ctx.dispatch_choice(client, j)
    }

    fn publish(&self, ctx: &mut SchedCtx) {
        for (j, q) in self.updates.iter().enumerate() {
            ctx.set_diagnostic(&format!("fragment{}_updates", j + 1), *q as f64);
        }
        ctx.set_diagnostic("assign_fallbacks", self.fallbacks as f64);
    }

    fn start_round(&mut self, ctx: &mut SchedCtx) -> Result<()> {
        let n = ctx.num_clients();
        for c in 0..n {
            self.dispatch(ctx, c)?;
        }
        self.awaiting = n;
        Ok(())
    }
}

impl Scheduler for AsyncFragments {
    fn on_start(&mut self, ctx: &mut SchedCtx) -> Result<()> {
        let m = ctx.mask_choices();
        if m == 0 {
            return Err(Error::component(
                "async-fragments",
                "the mask policy offers no fragments to assign (use mask `neuron-fragments`)",
            ));
        }
        let n = ctx.num_clients();
        self.costs = (0..n)
            .map(|c| (0..m).map(|j| ctx.job_duration_s(c, Some(j))).collect::<Result<Vec<_>>>())
            .collect::<Result<_>>()?;
        self.k = self.cfg.k.unwrap_or_else(|| offline_k(&self.costs));
        self.updates = vec![0; m];
        self.in_flight = vec![0; m];
        self.assigned = vec![None; n];
        ctx.set_diagnostic("assign_k_s", self.k);
        self.publish(ctx);
        if self.cfg.policy == Policy::SyncRounds {
            return self.start_round(ctx);
        }
        for c in 0..n {
            self.dispatch(ctx, c)?;
        }
        Ok(())
    }

    fn on_arrival(&mut self, ctx: &mut SchedCtx, client: usize) -> Result<()> {
        let j = self.assigned[client].take().expect("an arrival comes from an assigned client");
        self.in_flight[j] -= 1;
        self.updates[j] += 1;
        if self.cfg.policy == Policy::SyncRounds {
            self.awaiting -= 1;
            if self.awaiting > 0 {
                return Ok(());
            }
            self.publish(ctx);
            ctx.aggregate()?;
            if ctx.version() >= self.cfg.aggregations {
                ctx.stop();
                return Ok(());
            }
            return self.start_round(ctx);
        }
        self.publish(ctx);
        ctx.aggregate()?;
        if ctx.version() >= self.cfg.aggregations {
            ctx.stop();
            return Ok(());
        }
        self.dispatch(ctx, client)
    }

    fn planned_aggregations(&self) -> Option<u64> {
        Some(self.cfg.aggregations)
    }

    fn save_state(&self, out: &mut StateOut) -> Result<()> {
        out.put("costs", &self.costs)?;
        out.put("k", &self.k)?;
        out.put("updates", &self.updates)?;
        out.put("in_flight", &self.in_flight)?;
        out.put("assigned", &self.assigned)?;
        out.put("fallbacks", &self.fallbacks)?;
        out.put("awaiting", &self.awaiting)
    }

    fn load_state(&mut self, saved: &StateIn) -> Result<()> {
        self.costs = saved.get("costs")?;
        self.k = saved.get("k")?;
        self.updates = saved.get("updates")?;
        self.in_flight = saved.get("in_flight")?;
        self.assigned = saved.get("assigned")?;
        self.fallbacks = saved.get("fallbacks")?;
        self.awaiting = saved.get("awaiting")?;
        Ok(())
    }
}

fl_core::register!(Scheduler "async-fragments" => AsyncFragments::new(AsyncFragmentsConfig),
    summary: "Fed-RAA: assign each idle client a fragment (gre-raa, random, min-priority, sync-rounds), merge each arrival",
    paper: "Zhang et al., Fed-RAA");
