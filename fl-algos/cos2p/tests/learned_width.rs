//! `rolling-depth` with `width = "learned"`: below round Q̂ a window goes out at full width with
//! the client's width budget over its trained blocks; from Q̂ on, a client whose scores cover the
//! window gets the window physically cut to the units its scores keep, and one that has not
//! seen those blocks yet gets the budget without a mask round.

use fl_algo_cos2p::{RollingDepth, RollingDepthConfig, WidthChoice};
use fl_core::learned_width::{kept_units, score_name};
use fl_core::registry::{Builder, ComponentKind, Params, Registry};
use fl_core::rng::TensorNoise;
use fl_core::tch::Device;
use fl_core::testing::profiles;
use fl_core::{DataSpec, Mask, MaskCtx, MaskPolicy, Model, ParamSet, TensorRole, WidthAllocation};
use fl_data as _;
use fl_models as _;

fn vit() -> std::sync::Arc<dyn Model> {
    let registry = Registry::get().unwrap();
    let Builder::Model(build) = registry.component(ComponentKind::Model, "vit", "test", "model").unwrap().build else {
        unreachable!("registry keys builders by kind")
    };
    let params = "depth = 4\nexits = [1, 2, 3]\nhidden = 16\nmlp = 32\nheads = 4\npatch = 7";
    let spec = DataSpec { input_shape: vec![1, 28, 28], classes: 10, vocab_size: None };
    build(&Params::new("test", "model", params.parse().unwrap()), &spec).unwrap()
}

/// E1's speeds: client 0 is the weak one (R = 0.0625: 1 of 4 blocks, width 0.25), the others
/// strong (R = 0.5625: 3 blocks, width 0.75).
const SPEEDS: [f64; 4] = [21.0, 200.0, 275.0, 275.0];

fn try_mask(
    policy: &mut RollingDepth,
    model: &dyn Model,
    client: usize,
    version: u64,
    state: Option<&ParamSet>,
) -> fl_core::Result<Mask> {
    let global = model.init(&mut fl_core::rng::stream(1, &[0]));
    let profiles = profiles(&SPEEDS);
    let mut rng = fl_core::rng::stream(0, &[0]);
    policy.mask(&mut MaskCtx {
        client,
        profiles: &profiles,
        version,
        choice: None,
        structure: model.structure(),
        global: &global,
        client_state: state,
        rng: &mut rng,
    })
}

fn mask(policy: &mut RollingDepth, model: &dyn Model, client: usize, version: u64, state: Option<&ParamSet>) -> Mask {
    try_mask(policy, model, client, version, state).unwrap()
}

fn learned(cfg: RollingDepthConfig) -> RollingDepth {
    RollingDepth::new(RollingDepthConfig { width: WidthChoice::Learned, mask_rounds: 5, ..cfg })
}

fn scores(model: &dyn Model) -> ParamSet {
    let groups = &model.structure().groups;
    let names = groups.iter().map(|g| score_name(&g.name)).collect();
    let tensors = groups.iter().enumerate().map(|(i, g)| TensorNoise::new(i as u64).uniform(&[g.units], Device::Cpu));
    ParamSet::new(names, tensors.collect()).unwrap()
}

#[test]
fn a_mask_round_sends_the_window_at_full_width_with_the_clients_budget() {
    let model = vit();
    let structure = model.structure();
    let mut policy = learned(RollingDepthConfig::default());
    // A strong client in round 1: blocks 1..4 trained, block 0 frozen, at full width.
    let m = mask(&mut policy, model.as_ref(), 1, 1, None);
    let budget = m.width_budget().expect("a mask round carries the budget").clone();
    assert!(budget.learn && (budget.ratio - 0.75).abs() < 1e-12);
    let names = |gs: &[usize]| gs.iter().map(|&g| structure.groups[g].name.clone()).collect::<Vec<_>>();
    assert_eq!(
        names(&budget.learned),
        ["blocks.1.heads", "blocks.1.mlp", "blocks.2.heads", "blocks.2.mlp", "blocks.3.heads", "blocks.3.mlp"]
    );
    assert!(budget.random.is_empty());
    let shapes = structure.shapes();
    for t in m.held(shapes.len()) {
        assert_eq!(m.sub_shapes(&shapes)[m.held(shapes.len()).iter().position(|&h| h == t).unwrap()], shapes[t]);
    }
    assert_eq!(m.role(structure.tensor_index("blocks.0.mlp.fc1.weight").unwrap()), TensorRole::Freeze);
    // Table 3's ablation: the heads' masks random, the MLP's learned.
    let mut mlp_only =
        learned(RollingDepthConfig { learned_groups: vec!["mlp".into()], ..RollingDepthConfig::default() });
    let b = mask(&mut mlp_only, model.as_ref(), 0, 2, None).width_budget().unwrap().clone();
    assert_eq!(
        (names(&b.learned), names(&b.random)),
        (vec!["blocks.2.mlp".to_string()], vec!["blocks.2.heads".to_string()])
    );
}

#[test]
fn after_the_mask_rounds_the_window_is_cut_to_the_units_the_scores_keep() {
    let model = vit();
    let structure = model.structure();
    let mut policy = learned(RollingDepthConfig::default());
    let state = scores(model.as_ref());
    let m = mask(&mut policy, model.as_ref(), 2, 6, Some(&state));
    assert!(m.width_budget().is_none(), "a cut window trains what it holds");
    // Round 6 of a 3-block window: blocks 0..3; the budget those scores finalise to.
    let budget = mask(&mut policy, model.as_ref(), 2, 6, None).width_budget().expect("no scores yet: a budget").clone();
    assert!(!budget.learn, "no mask round after Q̂");
    let kept = kept_units(structure, &budget, Some(&state)).unwrap();
    let Mask::Structured(s) = &m else { panic!("a structured mask") };
    for (g, units) in structure.groups.iter().zip(&kept) {
        let member = &g.members[0];
        let held = s.kept(member.tensor, member.dim).map(<[i64]>::to_vec);
        match units {
            Some(units) => assert_eq!(
                held.as_deref(),
                Some(&units.iter().flat_map(|&u| u * member.block..(u + 1) * member.block).collect::<Vec<_>>()[..]),
                "{}",
                g.name
            ),
            None => assert!(held.is_none() || m.role(member.tensor) == TensorRole::Drop, "{}", g.name),
        }
    }
    // The cut window keeps at most R^width = 0.75 of its groups' parameters.
    let shapes = structure.shapes();
    let window: i64 = (0..3)
        .flat_map(|b| ["heads", "mlp"].map(move |k| format!("blocks.{b}.{k}")))
        .map(|name| {
            let g = structure.groups.iter().position(|g| g.name == name).unwrap();
            fl_core::learned_width::unit_params(structure, g) * structure.groups[g].units
        })
        .sum();
    let full_window = Mask::Structured(s.clone());
    let uncut = mask(&mut policy, model.as_ref(), 2, 6, None);
    let kept_params = full_window.held_per_tensor(&shapes).iter().sum::<i64>();
    let held_params = uncut.held_per_tensor(&shapes).iter().sum::<i64>();
    assert!(held_params - kept_params >= window / 4 - 1, "cut {} of {window}", held_params - kept_params);
}

#[test]
fn per_group_allocation_cuts_every_group_of_the_window_to_its_own_share() {
    let model = vit();
    let structure = model.structure();
    let cfg = RollingDepthConfig { width_allocation: WidthAllocation::PerGroup, ..RollingDepthConfig::default() };
    let mut policy = learned(cfg);
    assert_eq!(
        mask(&mut policy, model.as_ref(), 2, 1, None).width_budget().unwrap().allocation,
        WidthAllocation::PerGroup
    );
    // Every head scored above every neuron: a global allocation would keep all the heads.
    let state = scores(model.as_ref());
    let names = state.names().to_vec();
    let tensors: Vec<_> = names
        .iter()
        .zip(state.tensors())
        .map(|(n, t)| if n.ends_with("heads") { t + 10.0 } else { t.copy() })
        .collect();
    let state = ParamSet::new(names, tensors).unwrap();
    let Mask::Structured(s) = mask(&mut policy, model.as_ref(), 2, 6, Some(&state)) else {
        panic!("a structured mask")
    };
    // R^width = 0.75 of each trained block's 4 heads and 32 neurons, whatever the scores.
    for b in 0..3 {
        for (kind, units) in [("heads", 3), ("mlp", 24)] {
            let g = structure.groups.iter().position(|g| g.name == format!("blocks.{b}.{kind}")).unwrap();
            let member = &structure.groups[g].members[0];
            let held = s.kept(member.tensor, member.dim).map(<[i64]>::len);
            assert_eq!(held, Some(units * member.block as usize), "blocks.{b}.{kind}");
        }
    }
}

#[test]
fn an_unknown_group_kind_is_named() {
    let model = vit();
    let mut policy =
        learned(RollingDepthConfig { learned_groups: vec!["experts".into()], ..RollingDepthConfig::default() });
    let err = try_mask(&mut policy, model.as_ref(), 0, 0, None).unwrap_err().to_string();
    assert!(err.contains("learned_groups") && err.contains("experts"), "{err}");
}
