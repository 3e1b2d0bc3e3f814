fn main() {
    fl_build::link_libtorch();
    fl_build::compile_cuda_graphs("cuda/graph.cpp");
}
