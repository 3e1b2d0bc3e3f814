//! A fixed pool of worker threads running client jobs concurrently.
//!
//! Each worker pins libtorch's intra-op parallelism to a fixed thread count, one unless the
//! run asks for more (`[run] threads_per_job`): jobs, not ops, are the unit of parallelism,
//! and a fixed thread count keeps CPU results bit-identical whatever the number of workers.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::error::JobFailure;

type Task = Box<dyn FnOnce() + Send>;

/// Worker threads that start submitted closures in submission order, each thread with
/// libtorch's intra-op parallelism pinned to a fixed count. Dropping the pool skips queued
/// jobs and joins the threads.
pub struct WorkerPool {
    sender: Option<Sender<Task>>,
    /// Set when the pool is dropped: queued jobs whose results nobody waits for are skipped.
    cancelled: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

/// The eventual result of a submitted job.
pub struct JobHandle<T> {
    receiver: Receiver<std::thread::Result<T>>,
}

impl<T> JobHandle<T> {
    /// Blocks until the job finishes; a panic inside the job comes back as
    /// [`JobFailure::Panicked`] with the panic's message.
    pub fn wait(self) -> Result<T, JobFailure> {
        match self.receiver.recv() {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(panic)) => Err(JobFailure::Panicked(panic_message(&panic))),
            Err(_) => Err(JobFailure::WorkerLost),
        }
    }
}

/// The text a panic was raised with, or a stand-in.
pub(crate) fn panic_message(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "job panicked".into())
}

impl WorkerPool {
    /// A pool of `workers` threads (at least one), each job on one intra-op thread.
    pub fn new(workers: usize) -> Self {
        Self::with_job_threads(workers, 1)
    }

    /// A pool of `workers` threads (at least one), each job on `threads` intra-op threads.
    pub fn with_job_threads(workers: usize, threads_per_job: usize) -> Self {
        let (sender, receiver) = mpsc::channel::<Task>();
        let receiver = Arc::new(Mutex::new(receiver));
        let threads = (0..workers.max(1))
            .map(|i| {
                let receiver = Arc::clone(&receiver);
                std::thread::Builder::new()
                    .name(format!("fl-worker-{i}"))
                    .spawn(move || {
                        pin_intra_op_threads(threads_per_job);
                        loop {
                            let task = match receiver.lock() {
                                Ok(r) => r.recv(),
                                Err(_) => return,
                            };
                            match task {
                                Ok(task) => task(),
                                Err(_) => return,
                            }
                        }
                    })
                    .expect("spawn worker thread")
            })
            .collect();
        WorkerPool { sender: Some(sender), cancelled: Arc::new(AtomicBool::new(false)), threads }
    }

    /// Number of worker threads.
    pub fn workers(&self) -> usize {
        self.threads.len()
    }

    /// Queues `job` for the next free worker; its result (or its panic) comes back through the
    /// handle.
    pub fn submit<T: Send + 'static>(&self, job: impl FnOnce() -> T + Send + 'static) -> JobHandle<T> {
        let (tx, rx) = mpsc::channel();
        let cancelled = Arc::clone(&self.cancelled);
        let task: Task = Box::new(move || {
            if !cancelled.load(Ordering::Relaxed) {
                let _ = tx.send(catch_unwind(AssertUnwindSafe(job)));
            }
        });
        self.sender.as_ref().expect("pool is open").send(task).expect("workers are alive");
        JobHandle { receiver: rx }
    }
}

/// Pins libtorch's intra-op parallelism on the calling thread to `threads` (at least one).
pub(crate) fn pin_intra_op_threads(threads: usize) {
    tch::set_num_threads(i32::try_from(threads.max(1)).expect("a thread count fits an i32"));
}

impl Drop for WorkerPool {
    fn drop(&mut self) {
        self.cancelled.store(true, Ordering::Relaxed);
        self.sender.take();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_run_on_the_pools_intra_op_thread_count() {
        let threads = |pool: WorkerPool| pool.submit(tch::get_num_threads).wait().unwrap();
        assert_eq!(threads(WorkerPool::new(2)), 1);
        assert_eq!(threads(WorkerPool::with_job_threads(1, 3)), 3);
    }
}
