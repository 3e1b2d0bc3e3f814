//! A worked example (results checked with numpy) for RA-Fed, OAP and RAM-Fed.
//!
//! N = 3, four coordinates (coordinate i = region i), θ = [1, 2, 3, 4];
//! m₁ = [1,1,0,0], m₂ = [0,1,1,0], m₃ = [0,1,0,0] (Γ = [1,3,1,0]);
//! d₁ = [−.3,−.6,0,0], d₂ = [0,.3,.9,0], d₃ = [0,−.3,0,0];
//! RAM-Fed memory before the round U₁ = [.1,.1,.1,.1], U₂ = [.2,.2,.2,.2], U₃ = [0,0,0,.3].
//! The released code's aliased memory: one M before the round, M = [.1,.1,.1,.1].

use fl_algo_baselines::{CoverageMean, CoverageMeanConfig, Uncovered, Weighting};
use fl_algo_kdd23::{Correction, Memory, RamFed, RamFedConfig};
use fl_core::registry::{Builder, ComponentKind, Params, Registry};
use fl_core::tch::Tensor;
use fl_core::{AggregateCtx, Aggregator, ClientUpdate, Mask, ParamSet, UpdateStaleness};

fn set(v: &[f32]) -> ParamSet {
    ParamSet::new(vec!["w".into()], vec![Tensor::from_slice(v)]).unwrap()
}

fn values(p: &ParamSet) -> Vec<f32> {
    Vec::try_from(&p.tensors()[0]).unwrap()
}

fn updates() -> Vec<ClientUpdate> {
    let theta = set(&[1.0, 2.0, 3.0, 4.0]);
    let masks: [[f32; 4]; 3] = [[1.0, 1.0, 0.0, 0.0], [0.0, 1.0, 1.0, 0.0], [0.0, 1.0, 0.0, 0.0]];
    let deltas: [[f32; 4]; 3] = [[-0.3, -0.6, 0.0, 0.0], [0.0, 0.3, 0.9, 0.0], [0.0, -0.3, 0.0, 0.0]];
    (0..3)
        .map(|n| ClientUpdate {
            client: n,
            job: n as u64,
            ..fl_core::testing::client_update(
                theta.shallow_clone(),
                set(&deltas[n]),
                Mask::Elementwise(vec![Some(Tensor::from_slice(&masks[n]))]),
                100 * (n + 1),
            )
        })
        .collect()
}

fn run(agg: &mut dyn Aggregator) -> Vec<f32> {
    run_with(agg, &updates())
}

/// One round from θ = [1, 2, 3, 4] with these updates, all fresh.
fn run_with(agg: &mut dyn Aggregator, ups: &[ClientUpdate]) -> Vec<f32> {
    let fresh = vec![UpdateStaleness { versions: 0, seconds: 0.0, weight: 1.0 }; ups.len()];
    let ctx = AggregateCtx { version: 0, num_clients: 3, total_samples: 0, now: 0, staleness: &fresh, structure: None };
    values(&agg.aggregate(&set(&[1.0, 2.0, 3.0, 4.0]), ups, &ctx).unwrap())
}

fn assert_close(got: &[f32], want: &[f32]) {
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() < 1e-6, "got {got:?}, want {want:?}");
    }
}

fn with_memory(correction: Correction) -> RamFed {
    let mut agg = RamFed::new(RamFedConfig { correction, memory: Memory::PerClient });
    agg.set_memory(0, set(&[0.1, 0.1, 0.1, 0.1]));
    agg.set_memory(1, set(&[0.2, 0.2, 0.2, 0.2]));
    agg.set_memory(2, set(&[0.0, 0.0, 0.0, 0.3]));
    agg
}

#[test]
fn ra_fed_keeps_uncovered_coordinates() {
    let mut agg = CoverageMean::new(CoverageMeanConfig { weighting: Weighting::Uniform, uncovered: Uncovered::Keep });
    assert_close(&run(&mut agg), &[0.7, 1.8, 3.9, 4.0]);
}

#[test]
fn oap_zeroes_uncovered_coordinates() {
    let mut agg = CoverageMean::new(CoverageMeanConfig { weighting: Weighting::Uniform, uncovered: Uncovered::Zero });
    assert_close(&run(&mut agg), &[0.7, 1.8, 3.9, 0.0]);
}

#[test]
fn oap_by_name_weighs_uniformly_and_zeroes_uncovered_coordinates() {
    // The clients hold 100, 200 and 300 samples: only uniform weights give the golden values.
    let registry = Registry::get().unwrap();
    let c =
        registry.component(ComponentKind::Aggregator, "coverage-mean-zero-uncovered", "test", "aggregator").unwrap();
    let Builder::Aggregator(build) = c.build else { unreachable!("registry keys builders by kind") };
    let mut agg = build(&Params::new("test", "aggregator", fl_core::toml::Table::new())).unwrap();
    assert_close(&run(&mut *agg), &[0.7, 1.8, 3.9, 0.0]);
    let bad: fl_core::toml::Table = fl_core::toml::from_str("uncovered = \"keep\"").unwrap();
    let err = build(&Params::new("exp.toml", "aggregator", bad)).err().expect("the name fixes `uncovered`").to_string();
    assert!(err.contains("exp.toml") && err.contains("uncovered"), "{err}");
}

#[test]
fn ram_fed_paper_rule_and_memory_refresh() {
    let mut agg = with_memory(Correction::Gamma);
    assert_close(&run(&mut agg), &[0.7, 1.8, 3.8, 4.2]);
    assert_close(&values(agg.memory(0).unwrap()), &[-0.3, -0.6, 0.1, 0.1]);
    assert_close(&values(agg.memory(1).unwrap()), &[0.2, 0.3, 0.9, 0.2]);
    assert_close(&values(agg.memory(2).unwrap()), &[0.0, -0.3, 0.0, 0.3]);
}

#[test]
fn ram_fed_code_rule() {
    let mut agg = with_memory(Correction::N);
    assert_close(&run(&mut agg), &[0.966_666_7, 1.8, 3.333_333_3, 4.2]);
}

#[test]
fn ram_fed_with_empty_memory_and_full_masks_is_fedavg() {
    // Round 0: memories are 0 and every client trains everything: θ + mean of the deltas.
    let mut agg = RamFed::new(RamFedConfig::default());
    let mut ups = updates();
    for u in &mut ups {
        u.mask = Mask::Full;
    }
    assert_close(&run_with(&mut agg, &ups), &[0.9, 1.8, 3.3, 4.0]);
}

fn shared_memory() -> RamFed {
    let mut agg = RamFed::new(RamFedConfig { correction: Correction::N, memory: Memory::CodeShared });
    agg.set_memory(0, set(&[0.1, 0.1, 0.1, 0.1]));
    agg
}

#[test]
fn ram_fed_code_shared_memory() {
    // Clients refresh M in turn: M₁ = [−.3,−.6,.1,.1], M₂ = [−.3,.3,.9,.1], M₃ = [−.3,−.3,.9,.1];
    // θ + (M₁ + M₂ + M₃)/3 = [1,2,3,4] + [−.9,−.6,1.9,.3]/3. Coordinate 4, trained by nobody,
    // moves by the whole stored update, and coordinate 3 weighs client 2's update 2/3.
    let mut agg = shared_memory();
    assert_close(&run(&mut agg), &[0.7, 1.8, 3.633_333_3, 4.1]);
    for n in 0..3 {
        assert_close(&values(agg.memory(n).unwrap()), &[-0.3, -0.3, 0.9, 0.1]);
    }
}

#[test]
fn ram_fed_code_shared_memory_refreshes_in_client_order() {
    let mut reversed = updates();
    reversed.reverse();
    assert_close(&run_with(&mut shared_memory(), &reversed), &[0.7, 1.8, 3.633_333_3, 4.1]);
}

#[test]
fn ram_fed_code_shared_memory_needs_the_codes_correction() {
    let registry = Registry::get().unwrap();
    let c = registry.component(ComponentKind::Aggregator, "ram-fed", "test", "aggregator").unwrap();
    let Builder::Aggregator(build) = c.build else { unreachable!("registry keys builders by kind") };
    let table = |text: &str| -> fl_core::toml::Table { fl_core::toml::from_str(text).unwrap() };
    let err = build(&Params::new("exp.toml", "aggregator", table("memory = \"code-shared\"")))
        .err()
        .expect("code-shared with the paper's 1/Γ is refused")
        .to_string();
    assert!(err.contains("exp.toml") && err.contains("aggregator.correction") && err.contains("\"n\""), "{err}");
    let shared = table("memory = \"code-shared\"\ncorrection = \"n\"");
    assert!(build(&Params::new("exp.toml", "aggregator", shared)).is_ok());
}
