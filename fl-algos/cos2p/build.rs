fn main() {
    fl_build::link_libtorch();
}
