//! When a FedASMU device asks for the newest global model (§4.3.1): never, after a fixed
//! share of its work (`pull_at`: the ablation's H1, H2, H3), or at a slot learned by RL
//! (`rl_slot`).
//!
//! The learned slot l* ∈ 1 … E − 1 counts the local epochs done before the request (the work
//! cut into `slots` = E equal parts). A
//! device's first session takes it from the server's meta policy ([`MetaPolicy`], REINFORCE);
//! later sessions move it by an action a ∈ {−1, 0, +1} (clamped to 1 … E − 1), chosen
//! ε-greedily from the device's Q-table H(l*, a), which learns by Eq. 8:
//! `H(l, a) += φ_Q (R + ψ_Q max_a' H(l + a, a') − H(l, a))`. The reward R of a session is the
//! loss before the merge minus the loss after it, on one batch, as the trainer measures it
//! (`learned_pull`). Nothing learns from a session that merged nothing (the server had no
//! newer model), as in the paper.
//!
//! The server learns when the upload arrives (the reward travels with it), one upload at a
//! time in virtual-time order: the device learns its Q-table at the merge in the paper, and
//! nothing reads the table before its next session starts, so this changes nothing for the
//! Q-tables; the meta policy's steps land later than a device-side step would.

use fl_core::{InvalidKey, Result, SchedCtx, StateIn, StateOut};
use rand::Rng as _;
use rand::seq::IndexedRandom;
use serde::{Deserialize, Serialize};
use smart_default::SmartDefault;

use crate::meta_policy::MetaPolicy;

/// The `[scheduler.rl_slot]` table: the spec's [rec] values (§3.4) and Table 3's η_RL.
#[derive(Debug, Clone, PartialEq, SmartDefault, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RlSlotConfig {
    /// The parts the local work is cut into: a request comes after l of them, l ∈ 1 … slots − 1
    /// (with `slots` = E, the trainer's local epochs, l counts epochs done, as in the paper).
    #[default(5)]
    pub slots: usize,
    /// ε of the Q-tables' ε-greedy choice.
    #[default(0.1)]
    pub epsilon: f64,
    /// φ_Q: the Q-tables' learning rate.
    #[default(0.5)]
    pub q_rate: f64,
    /// ψ_Q: the Q-tables' discount.
    #[default(0.9)]
    pub q_discount: f64,
    /// η_RL: the meta policy's learning rate (Table 3: 0.001).
    #[default(0.001)]
    pub meta_rate: f64,
    /// ρ: the rate of the meta policy's moving baseline.
    #[default(0.1)]
    pub baseline_rate: f64,
    /// The meta policy's LSTM units.
    #[default(32)]
    pub hidden: usize,
}

impl RlSlotConfig {
    pub(crate) fn validate(&self) -> std::result::Result<(), InvalidKey> {
        if self.slots < 2 {
            return Err(InvalidKey::new(
                "rl_slot.slots",
                format!("expected at least 2 (a request needs work before and after it), got {}", self.slots),
            ));
        }
        for (key, v) in [
            ("epsilon", self.epsilon),
            ("q_rate", self.q_rate),
            ("q_discount", self.q_discount),
            ("baseline_rate", self.baseline_rate),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return Err(InvalidKey::new(format!("rl_slot.{key}"), format!("expected a value in [0, 1], got {v}")));
            }
        }
        if !(self.meta_rate >= 0.0 && self.meta_rate.is_finite()) {
            return Err(InvalidKey::new("rl_slot.meta_rate", format!("expected a rate ≥ 0, got {}", self.meta_rate)));
        }
        if self.hidden == 0 {
            return Err(InvalidKey::new("rl_slot.hidden", "expected at least 1 unit"));
        }
        Ok(())
    }
}

/// Checks the scheduler's request keys: `pull_at` a share in (0, 1), `rl_slot` valid, not both.
pub(crate) fn validate_request(
    pull_at: Option<f64>,
    rl_slot: Option<&RlSlotConfig>,
) -> std::result::Result<(), InvalidKey> {
    if let Some(share) = pull_at.filter(|s| !(*s > 0.0 && *s < 1.0)) {
        return Err(InvalidKey::new("pull_at", format!("expected a share of the local work in (0, 1), got {share}")));
    }
    match rl_slot {
        Some(_) if pull_at.is_some() => Err(InvalidKey::new(
            "rl_slot",
            "a fixed request share (pull_at) and a learned one (rl_slot) exclude each other: keep one",
        )),
        Some(rl) => rl.validate(),
        None => Ok(()),
    }
}

/// What decided a session's slot, kept until its upload arrives.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum Decision {
    /// The meta policy's decisions, one per epoch up to the request.
    Meta(Vec<bool>),
    /// The Q-table's action (0: −1, 1: stay, 2: +1) from slot `from` to slot `to`.
    Step { from: usize, action: usize, to: usize },
}

/// The three actions on the slot.
const MOVES: [i64; 3] = [-1, 0, 1];

/// A learned request slot: the meta policy and every device's Q-table.
pub(crate) struct LearnedSlot {
    cfg: RlSlotConfig,
    /// Built at the first request (its parameters are drawn from the scheduler's stream).
    meta: Option<MetaPolicy>,
    /// Each device's current slot; None before its first session.
    slot: Vec<Option<usize>>,
    /// Each device's table H(l, a), `(E − 1) × 3` values, row l − 1.
    q: Vec<Vec<f64>>,
    /// The decision of each device's session in flight.
    pending: Vec<Option<Decision>>,
    /// Rewards received, and their sum (diagnostics).
    rewards: u64,
    reward_sum: f64,
}

impl LearnedSlot {
    fn new(cfg: RlSlotConfig) -> Self {
        LearnedSlot {
            cfg,
            meta: None,
            slot: Vec::new(),
            q: Vec::new(),
            pending: Vec::new(),
            rewards: 0,
            reward_sum: 0.0,
        }
    }

    fn ensure(&mut self, ctx: &mut SchedCtx) {
        let n = ctx.num_clients();
        if self.slot.len() != n {
            let slots = self.cfg.slots - 1;
            self.slot = vec![None; n];
            self.q = vec![vec![0.0; slots * 3]; n];
            self.pending = vec![None; n];
        }
        if self.meta.is_none() {
            self.meta = Some(MetaPolicy::new(self.cfg.hidden, ctx.rng()));
        }
    }

    /// The slot of `client`'s next session.
    fn choose(&mut self, ctx: &mut SchedCtx, client: usize) -> usize {
        self.ensure(ctx);
        let last = self.cfg.slots - 1;
        let (slot, decision) = match self.slot[client] {
            None => {
                let (slot, decisions) = self.meta.as_ref().expect("built above").choose(self.cfg.slots, ctx.rng());
                (slot, Decision::Meta(decisions))
            }
            Some(from) => {
                let row = &self.q[client][(from - 1) * 3..from * 3];
                let action = if ctx.rng().random::<f64>() < self.cfg.epsilon {
                    ctx.rng().random_range(0..3)
                } else {
                    let best = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    let ties: Vec<usize> = (0..3).filter(|&a| row[a] == best).collect();
                    *ties.choose(ctx.rng()).expect("a row has a maximum")
                };
                let to = (from as i64 + MOVES[action]).clamp(1, last as i64) as usize;
                (to, Decision::Step { from, action, to })
            }
        };
        self.slot[client] = Some(slot);
        self.pending[client] = Some(decision);
        ctx.set_diagnostic(&format!("slot.{client}"), slot as f64);
        slot
    }

    /// Learns from the session of `client` that just arrived, with its reward if it merged.
    fn learn(&mut self, ctx: &mut SchedCtx, client: usize, reward: Option<f64>) {
        let Some(decision) = self.pending.get_mut(client).and_then(Option::take) else { return };
        let Some(r) = reward else { return };
        self.rewards += 1;
        self.reward_sum += r;
        match decision {
            Decision::Meta(decisions) => {
                let meta = self.meta.as_mut().expect("a decision of the meta policy");
                meta.learn(&decisions, r, self.cfg.baseline_rate, self.cfg.meta_rate);
            }
            Decision::Step { from, action, to } => {
                let q = &mut self.q[client];
                let next = q[(to - 1) * 3..to * 3].iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let h = &mut q[(from - 1) * 3 + action];
                *h += self.cfg.q_rate * (r + self.cfg.q_discount * next - *h);
            }
        }
        self.diagnose(ctx);
    }

    /// The devices' mean slot, the meta policy's mean first slot and the mean reward so far
    /// (each device's own slot is `slot.<device>`, set when it is chosen).
    fn diagnose(&self, ctx: &mut SchedCtx) {
        let slots: Vec<usize> = self.slot.iter().flatten().copied().collect();
        if !slots.is_empty() {
            ctx.set_diagnostic("slot_mean", slots.iter().sum::<usize>() as f64 / slots.len() as f64);
        }
        if let Some(meta) = &self.meta {
            let p = meta.slot_probabilities(self.cfg.slots);
            ctx.set_diagnostic("slot_meta_mean", p.iter().enumerate().map(|(i, p)| (i + 1) as f64 * p).sum());
            ctx.set_diagnostic("reward_baseline", meta.baseline());
        }
        ctx.set_diagnostic("reward_mean", self.reward_sum / self.rewards.max(1) as f64);
    }

    fn save(&self, out: &mut StateOut) -> Result<()> {
        out.put("slot.devices", &(&self.slot, &self.q, &self.pending, self.rewards, self.reward_sum))?;
        match &self.meta {
            Some(meta) => {
                out.put("slot.meta", &true)?;
                meta.save(out)
            }
            None => out.put("slot.meta", &false),
        }
    }

    fn load(&mut self, saved: &StateIn) -> Result<()> {
        (self.slot, self.q, self.pending, self.rewards, self.reward_sum) = saved.get("slot.devices")?;
        if saved.get::<bool>("slot.meta")? {
            // The shapes come from the config; the values from the checkpoint.
            let mut meta = MetaPolicy::new(self.cfg.hidden, &mut fl_core::rng::stream(0, &[]));
            meta.load(saved)?;
            self.meta = Some(meta);
        }
        Ok(())
    }
}

/// When devices ask for the newest model.
pub(crate) enum RequestSlot {
    /// Never (FedASMU-FA and -0).
    Never,
    /// After this share of the work.
    Fixed(f64),
    /// At a learned slot.
    Learned(Box<LearnedSlot>),
}

impl RequestSlot {
    /// From the scheduler's (validated) `pull_at` and `rl_slot`.
    pub fn new(pull_at: Option<f64>, rl_slot: Option<RlSlotConfig>) -> Self {
        match (pull_at, rl_slot) {
            (_, Some(rl)) => RequestSlot::Learned(Box::new(LearnedSlot::new(rl))),
            (Some(share), None) => RequestSlot::Fixed(share),
            (None, None) => RequestSlot::Never,
        }
    }

    /// The share of its work after which `client`'s next session asks, if it asks.
    pub fn share(&mut self, ctx: &mut SchedCtx, client: usize) -> Option<f64> {
        match self {
            RequestSlot::Never => None,
            RequestSlot::Fixed(share) => Some(*share),
            RequestSlot::Learned(learned) => {
                let slot = learned.choose(ctx, client);
                Some(slot as f64 / learned.cfg.slots as f64)
            }
        }
    }

    /// `client`'s upload arrived (it is the last pending update of that client): trace the
    /// weight its merge gave the pulled model (`beta.<device>`) and learn from its reward.
    pub fn on_arrival(&mut self, ctx: &mut SchedCtx, client: usize) {
        let merge = ctx.pending_updates().iter().rev().find(|u| u.client == client).and_then(|u| u.pull_merge);
        if let Some(m) = merge {
            ctx.set_diagnostic(&format!("beta.{client}"), m.weight);
        }
        if let RequestSlot::Learned(learned) = self {
            learned.learn(ctx, client, merge.map(|m| m.reward));
        }
    }

    pub fn save(&self, out: &mut StateOut) -> Result<()> {
        match self {
            RequestSlot::Learned(learned) => learned.save(out),
            RequestSlot::Never | RequestSlot::Fixed(_) => Ok(()),
        }
    }

    pub fn load(&mut self, saved: &StateIn) -> Result<()> {
        match self {
            RequestSlot::Learned(learned) => learned.load(saved),
            RequestSlot::Never | RequestSlot::Fixed(_) => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use fl_core::scheduler_testing::{Action, RecordingContext};
    use fl_core::tch::Tensor;
    use fl_core::{ClientUpdate, Mask, ParamSet, Scheduler};

    use super::*;
    use crate::{PeriodicTrigger, PeriodicTriggerConfig};

    fn cfg(epsilon: f64) -> RlSlotConfig {
        RlSlotConfig { epsilon, hidden: 4, ..RlSlotConfig::default() }
    }

    #[test]
    fn a_first_session_asks_the_meta_policy_and_later_ones_step_the_q_table_by_eq_8() {
        let mut ctx = RecordingContext::new(3, 1);
        let mut slot = LearnedSlot::new(cfg(0.0));
        let first = slot.choose(&mut ctx, 0);
        assert!((1..=4).contains(&first));
        assert!(matches!(slot.pending[0], Some(Decision::Meta(ref d)) if d.len() == first));
        slot.learn(&mut ctx, 0, Some(0.5));
        assert!((slot.meta.as_ref().unwrap().baseline() - 0.05).abs() < 1e-12, "b = 0.9·0 + 0.1·0.5");

        // From `first`, an action to `to`; reward 2 with H = 0: H(first, a) = 0.5 (2 + 0.9·0 − 0).
        let to = slot.choose(&mut ctx, 0);
        let Some(Decision::Step { from, action, to: to2 }) = slot.pending[0].clone() else { panic!("a Q step") };
        assert_eq!((from, to2), (first, to));
        assert_eq!(to as i64, (first as i64 + MOVES[action]).clamp(1, 4));
        slot.learn(&mut ctx, 0, Some(2.0));
        assert_eq!(slot.q[0][(first - 1) * 3 + action], 1.0);
        assert_eq!(slot.q[0].iter().filter(|&&h| h != 0.0).count(), 1, "one entry learned");

        // Greedy (ε = 0) from `to`: a second step, reward −1, reads max H(next, ·), which is 1
        // exactly when the step leads back to `first` by the learned action's row.
        let next = slot.choose(&mut ctx, 0);
        let Some(Decision::Step { from, action: a2, to: n2 }) = slot.pending[0].clone() else { panic!("a Q step") };
        assert_eq!((from, n2), (to, next));
        let before = slot.q[0][(to - 1) * 3 + a2];
        let max_next = slot.q[0][(next - 1) * 3..next * 3].iter().copied().fold(f64::NEG_INFINITY, f64::max);
        slot.learn(&mut ctx, 0, Some(-1.0));
        let want = before + 0.5 * (-1.0 + 0.9 * max_next - before);
        assert_eq!(slot.q[0][(to - 1) * 3 + a2], want);
        assert_eq!(ctx.diagnostics["reward_mean"], (0.5 + 2.0 - 1.0) / 3.0);
    }

    #[test]
    fn a_session_that_merged_nothing_teaches_nothing_and_slots_stay_in_range() {
        let mut ctx = RecordingContext::new(1, 2);
        let mut slot = LearnedSlot::new(cfg(1.0));
        let mut last = slot.choose(&mut ctx, 0);
        slot.learn(&mut ctx, 0, None);
        let meta_baseline = slot.meta.as_ref().unwrap().baseline();
        for _ in 0..200 {
            let next = slot.choose(&mut ctx, 0);
            assert!((1..=4).contains(&next) && next.abs_diff(last) <= 1, "{last} → {next}");
            last = next;
            slot.learn(&mut ctx, 0, None);
            assert!(slot.pending[0].is_none());
        }
        assert!(slot.q[0].iter().all(|&h| h == 0.0));
        assert_eq!(slot.meta.as_ref().unwrap().baseline(), meta_baseline);
        assert_eq!(slot.rewards, 0);
    }

    /// An arrived update of `client` carrying `reward`.
    fn arrived(client: usize, reward: Option<f64>) -> ClientUpdate {
        let w = ParamSet::new(vec!["w".into()], vec![Tensor::from_slice(&[0.0f32])]).unwrap();
        ClientUpdate {
            client,
            job: 0,
            base_version: 0,
            base: w.shallow_clone(),
            mask: Mask::Full,
            choice: None,
            delta: w,
            pulled_version: reward.map(|_| 1),
            samples: 1,
            multiplicity: 1,
            train_loss: 0.0,
            lr_sum: 1.0,
            pull_merge: reward.map(|reward| fl_core::trainer::PullMerge { weight: 0.5, reward }),
            dispatched_at: 0,
            arrived_at: 0,
        }
    }

    #[test]
    fn the_scheduler_asks_at_learned_slots_and_learns_from_the_rewards_arrivals_carry() {
        let cfg = PeriodicTriggerConfig {
            devices_per_trigger: 2,
            rl_slot: Some(cfg(0.1)),
            aggregations: 100,
            ..PeriodicTriggerConfig::default()
        };
        let mut s = PeriodicTrigger::new(cfg);
        let mut ctx = RecordingContext::new(4, 3);
        s.on_start(&mut ctx).unwrap();
        let started: Vec<(usize, f64)> = ctx
            .take_actions()
            .into_iter()
            .filter_map(|a| match a {
                Action::DispatchWithPull { client, share } => Some((client, share)),
                _ => None,
            })
            .collect();
        assert_eq!(started.len(), 2);
        assert!(started.iter().all(|(_, s)| [0.2, 0.4, 0.6, 0.8].contains(s)), "{started:?}");
        let busy: Vec<usize> = started.iter().map(|&(c, _)| c).collect();
        ctx.arrive(busy[0]);
        ctx.pending_updates.push(arrived(busy[0], Some(0.3)));
        s.on_arrival(&mut ctx, busy[0]).unwrap();
        assert_eq!(ctx.diagnostics["reward_mean"], 0.3);
        assert!((ctx.diagnostics["reward_baseline"] - 0.03).abs() < 1e-12);
        assert_eq!(ctx.diagnostics[&format!("beta.{}", busy[0])], 0.5, "the merge's weight, traced");
        assert_eq!(ctx.diagnostics[&format!("slot.{}", busy[0])], started[0].1 * 5.0);

        // The other device merged nothing: no learning, the mean reward stays.
        ctx.arrive(busy[1]);
        ctx.pending_updates.push(arrived(busy[1], None));
        s.on_arrival(&mut ctx, busy[1]).unwrap();
        assert_eq!(ctx.diagnostics["reward_mean"], 0.3);
    }
}
