//! Host wall-clock time, kept out of the deterministic metrics (it goes to `timing.csv` and
//! `summary.json`'s `wall_time_s`).

#[allow(clippy::disallowed_methods)] // reason: host timings are reported, never fed back into the simulation
fn now() -> std::time::Instant {
    std::time::Instant::now()
}

pub struct Stopwatch(std::time::Instant);

impl Stopwatch {
    pub fn start() -> Self {
        Stopwatch(now())
    }

    pub fn elapsed_s(&self) -> f64 {
        self.0.elapsed().as_secs_f64()
    }
}
