//! Co-S²P: Li et al., "Unity is Power: Semi-Asynchronous Collaborative Training of Large-Scale
//! Models with Structured Pruning in Resource-Limited Clients" (arXiv:2410.08457; spec
//! `papers/cos2p.md`).
//!
//! Built so far: the semi-asynchronous server loop (`semi-async`, Algorithm 1), the aggregation
//! by segment importance (`segment-importance`, Eqs. 4–5), the rolling depth windows with
//! their widths and inner exits (`rolling-depth`, §2.1–2.2, on fl-core's
//! [`fl_core::Structure::submodel_with_exits`]) and learned width masks (`width = "learned"`,
//! §2.3–2.4, trained by fl-core's `[trainer] width_masks`); self-distillation across the exits
//! is fl-core's `[trainer] distill` (Eq. 3); Top-5, macro-F1 and resource utilisation (Eq. 17)
//! are the engine's. Methods `cos2p` and `cos2p-async`. Not built yet: exits kept as personal
//! client state, client-side metrics, the Jetson device profiles and the reproduction.

mod methods;
mod rolling_depth;
mod segment_importance;
mod semi_async;

pub use rolling_depth::{RollingDepth, RollingDepthConfig, WidthChoice};
pub use segment_importance::{SegmentImportance, SegmentImportanceConfig};
pub use semi_async::{SemiAsync, SemiAsyncConfig};
