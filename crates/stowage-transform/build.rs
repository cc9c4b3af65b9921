//! Declares the `fuzzing` cfg that cargo-fuzz sets, so `#[cfg(fuzzing)]` (a smaller lifting
//! threshold in `src/fastjson.rs`) is not an unexpected cfg to rustc's check.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(fuzzing)");
}
