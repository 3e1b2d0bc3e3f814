#!/bin/bash
# Prepares gpu-bundle/ for a lent GPU machine, where building would spend its short budget:
# the stripped release `fl` and end-to-end bench binaries, MNIST gzipped, and the kdd23 full
# MNIST column (67 runs, at an unrun seed so that none is restored from records/) as a pack
# directory, and the bench's kdd23 cell cut to 40 rounds (kdd23-cell-40.toml, a cell long
# enough to time); under 64 MiB in all, and ignored through .git/info/exclude. From the repository
# root, on the CPU machine:
#   fl-bench/scripts/gpu_bundle.sh
# then on the GPU machine, from the repository root with gpu-bundle carried along:
#   gpu-bundle/run.sh
# which runs gpu_checks.sh (first the experiment $CELL, a path from the repository root,
# default gpu-bundle/kdd23-cell-40.toml, with CUDA graphs, with kept graphs and without, and with
# kept graphs evaluated once; the
# quickstart on CUDA and CPU; the column as one pack for $PACK_SECONDS, default 90; last,
# FedDyn, MOON, ASO-Fed, augmentation and the smoke-scale Co-S²P, AdaViT, Q-ViT, PLATON and
# FedASMU runs in gpu-bundle/checks, with graphs and without), the end-to-end bench (CPU, then CUDA), then the
# cell for 20 rounds on every CPU core, one thread a job and then 4 ([run] threads_per_job),
# each under a timeout (290, 220 and 2 x 40 s: under the device's 600 s a command), about 9
# minutes together, and leaves their outputs in $OUT.
set -euo pipefail
cd "$(dirname "$0")/../.."
b=gpu-bundle
mkdir -p .git/info
grep -qx "/$b/" .git/info/exclude 2>/dev/null || echo "/$b/" >> .git/info/exclude
rm -rf "$b"
mkdir -p "$b/data/mnist" "$b/pack"

cargo build --release -p fl-cli
strip -o "$b/fl" target/release/fl
bench=$(cargo bench -p fl-bench --bench end_to_end --no-run --message-format=json |
    python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "end_to_end":
        print(m["executable"])')
strip -o "$b/end_to_end" "$bench"

data=${FL_DATA_DIR:-$HOME/.cache/fl/data}/mnist
for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
    gzip -c "$data/$f" > "$b/data/mnist/$f.gz"
done

emit=$(mktemp -d)
cargo xtask reproduce kdd23 --scale full --only mnist --seeds 9 --emit slurm "$emit/slurm" --out "$emit/out" >/dev/null
for toml in "$emit"/slurm/experiments/*.toml; do
    run="$b/pack/$(basename "$toml" .toml)"
    mkdir -p "$run"
    cp "$toml" "$run/experiment.toml"
done
rm -rf "$emit"
# Runs at the smoke scale, on MNIST for Fashion-MNIST (the same shapes) and cut short:
# gpu_checks.sh compares their metrics with and without CUDA graphs. check PAPER RUNS FROM TO
# emits PAPER's RUNS into checks/PAPER-<method>.toml with the line FROM replaced by TO.
mkdir -p "$b/checks"
check() {
    local emit toml to
    emit=$(mktemp -d)
    cargo xtask reproduce "$1" --scale smoke --seeds 9 --runs "$2" --emit slurm "$emit/slurm" --out "$emit/out" >/dev/null
    for toml in "$emit"/slurm/experiments/*.toml; do
        to="$b/checks/$1-$(sed -n 's/^method = "\(.*\)"$/\1/p' "$toml").toml"
        sed -e 's/^name = "fashion-mnist"$/name = "mnist"/' -e "s/^$3\$/$4/" "$toml" > "$to"
        grep -qx "$4" "$to"
        grep -qx 'name = "mnist"' "$to"
    done
    rm -rf "$emit"
}
# Co-S²P (Adan, distillation, learned widths), FedAvg+AdaViT, FedAvg+Q-ViT and FedAvg+PLATON,
# 2 rounds.
check cos2p fashion-mnist-e1/cos2p,fashion-mnist-e1/fedavg-adavit,fashion-mnist-e1/fedavg-qvit,fashion-mnist-e1/fedavg-platon \
    "rounds = 6" "rounds = 2"
# FedASMU (jobs that pull the global model mid-training), 20 updates.
check fedasmu fashion-mnist-lenet/fedasmu "max_updates = 100" "max_updates = 20"
sed 's/^rounds = 3$/rounds = 40/' fl-bench/experiments/kdd23-cell.toml > "$b/kdd23-cell-40.toml"
grep -qx 'rounds = 40' "$b/kdd23-cell-40.toml"
sed 's/^rounds = 3$/rounds = 20/' fl-bench/experiments/kdd23-cell.toml > "$b/kdd23-cell-cpu.toml"
printf '[run]\nthreads_per_job = 4\n' | cat "$b/kdd23-cell-cpu.toml" - > "$b/kdd23-cell-cpu-4-threads.toml"

cat > "$b/run.sh" <<'EOF'
#!/bin/bash
# Issue 28's GPU figures, from the repository root of the GPU machine (see
# fl-bench/scripts/gpu_bundle.sh); outputs in $OUT.
set -u
cd "$(dirname "$0")/.."
b=gpu-bundle
out=${OUT:-$(mktemp -d)}
torch=$(python3 -c 'import os, torch; print(os.path.dirname(torch.__file__))')
export LD_LIBRARY_PATH="$torch/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LIBTORCH="$torch" FL_DATA_DIR="$PWD/$b/data" FL_BENCH_DIR="$PWD/fl-bench"
gunzip -kf "$b"/data/mnist/*.gz
{ nvidia-smi -L; python3 -c 'import torch; print("torch", torch.__version__)'; nproc; } > "$out/machine.txt" 2>&1
timeout 290 fl-bench/scripts/gpu_checks.sh "$PWD/$b/fl" "$PWD/$b/pack" "${PACK_SECONDS:-90}" \
    "$PWD/${CELL:-$b/kdd23-cell-40.toml}" "$PWD/$b"/checks/*.toml > "$out/gpu_checks.txt" 2>&1
echo "gpu_checks.sh: exit status $?" >> "$out/gpu_checks.txt"
timeout 220 "$b/end_to_end" --bench > "$out/bench.txt" 2>&1
echo "end_to_end: exit status $?" >> "$out/bench.txt"
for cell in kdd23-cell-cpu kdd23-cell-cpu-4-threads; do
    echo "$cell (20 rounds), CPU, $(nproc) cores: $(timeout 40 "$b/fl" run "$b/$cell.toml" --device cpu --out "$(mktemp -d)" --quiet | head -1)"
done > "$out/cpu_cores.txt" 2>&1
cp "$b/pack/pack.txt" "$out/" 2>/dev/null
grep -v "memory plan" "$out/machine.txt" "$out/gpu_checks.txt" "$out/bench.txt" "$out/cpu_cores.txt"
EOF
chmod +x "$b/run.sh"
du -sh "$b"
